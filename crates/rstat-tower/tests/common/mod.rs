//! A real HTTP/1 server on loopback around an axum router, and a client,
//! for the loopback tests. The server tells when each of its connections
//! is closed, so a test knows when no poll of a request's future or body
//! can run any more, without waiting for time to pass.
#![allow(dead_code)]

use std::net::SocketAddr;

use axum::Router;
use bytes::Bytes;
use http::{HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// A server on 127.0.0.1 serving `app`.
pub struct Server {
    pub addr: SocketAddr,
    closed: mpsc::UnboundedReceiver<()>,
    accept: JoinHandle<()>,
}

impl Server {
    /// Bind 127.0.0.1:0 and serve `app`, each connection on its own task.
    pub async fn start(app: Router) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().unwrap();
        let (tx, closed) = mpsc::unbounded_channel();
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let svc = TowerToHyperService::new(app.clone());
                let tx = tx.clone();
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                    // The connection's task is done: every future and body
                    // of its requests was polled for the last time.
                    let _ = tx.send(());
                });
            }
        });
        Server {
            addr,
            closed,
            accept,
        }
    }

    /// Wait until `n` more connections have been closed by the server.
    pub async fn closed(&mut self, n: usize) {
        for _ in 0..n {
            self.closed.recv().await.expect("the accept loop runs");
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// One client connection.
pub struct Conn {
    sender: SendRequest<Empty<Bytes>>,
    driver: JoinHandle<()>,
}

impl Conn {
    pub async fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).await.expect("connect");
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        });
        Conn { sender, driver }
    }

    /// GET `path`, with header `x-tenant` set to `tenant`'s bytes if given;
    /// the status and the whole body.
    pub async fn get(&mut self, path: &str, tenant: Option<&[u8]>) -> (StatusCode, Bytes) {
        let mut req = Request::get(path)
            .header("host", "localhost")
            .body(Empty::new())
            .unwrap();
        if let Some(t) = tenant {
            req.headers_mut().insert(
                "x-tenant",
                HeaderValue::from_bytes(t).expect("a header value"),
            );
        }
        self.sender.ready().await.expect("connection ready");
        let resp = self.sender.send_request(req).await.expect("response");
        let status = resp.status();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        (status, body)
    }

    /// Close the connection (the server sees it end).
    pub async fn close(self) {
        drop(self.sender);
        let _ = self.driver.await;
    }
}

/// A multi-threaded runtime with a few workers, so requests move between
/// threads.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(3)
        .enable_io()
        .build()
        .unwrap()
}
