//! The accounting allocator over mimalloc (`--features mimalloc`): the
//! same charges as over `System`, every alignment, frees on another
//! thread, realloc.
#![cfg(feature = "mimalloc")]

mod common;

use std::alloc::{alloc, dealloc, realloc, Layout};

use common::alloc::charged;
use mimalloc::MiMalloc;
use rstat::alloc::Accounted;
use rstat::memory::Memory;
use rstat::Rstat;

#[global_allocator]
static ALLOC: Accounted<MiMalloc> = Accounted::new(MiMalloc);

#[test]
fn accounted_over_mimalloc() {
    let rs = Rstat::new();
    let mem = Memory::register_with(&rs, rstat::alloc::heap_config()).unwrap();
    ALLOC.install(&rs, &mem).unwrap();
    let g = rs.root().create_child("mi").unwrap();
    let current = || common::alloc::current(&mem, &g);
    let mut objs = Vec::new();
    let mut want = 0u64;
    for shift in 0..=16 {
        for size in [1usize, 24, 4096, 100_000] {
            let l = Layout::from_size_align(size, 1 << shift).unwrap();
            let p = {
                let _in = g.enter();
                // SAFETY: non-zero size.
                unsafe { alloc(l) }
            };
            assert!(!p.is_null() && p as usize % l.align() == 0);
            want += charged(size);
            objs.push((p as usize, l));
        }
    }
    assert_eq!(current(), want);
    // Grow each object from another thread: its owner pays the difference.
    let objs = std::thread::spawn(move || {
        objs.into_iter()
            .map(|(p, l)| {
                // SAFETY: from `alloc(l)`; non-zero new size.
                let q = unsafe { realloc(p as *mut u8, l, l.size() * 2) };
                assert!(!q.is_null());
                (
                    q as usize,
                    Layout::from_size_align(l.size() * 2, l.align()).unwrap(),
                )
            })
            .collect::<Vec<_>>()
    })
    .join()
    .unwrap();
    let grown: u64 = objs.iter().map(|(_, l)| charged(l.size())).sum();
    assert_eq!(current(), grown);
    std::thread::spawn(move || {
        for (p, l) in objs {
            // SAFETY: from `realloc` to `l`.
            unsafe { dealloc(p as *mut u8, l) };
        }
    })
    .join()
    .unwrap();
    assert_eq!(current(), 0);
}
