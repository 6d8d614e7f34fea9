//! The engine against a sequential reference model (plain maps), driven by
//! proptest: random trees, updates on random CPUs, removals, handle drops
//! and reads. Every read must agree exactly with the model, hierarchical and
//! local, in both separate and unified mode.

use proptest::prelude::*;
use rstat::testing::ControllerHandleExt;
use rstat::{Error, Group, Rstat};

#[derive(Clone, Debug)]
enum Op {
    Create {
        parent: usize,
    },
    Update {
        g: usize,
        cpu: usize,
        item: usize,
        delta: i64,
    },
    Remove {
        g: usize,
    },
    Read {
        g: usize,
    },
    Lookup {
        g: usize,
    },
    DropHandle {
        g: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => any::<usize>().prop_map(|parent| Op::Create { parent }),
        6 => (any::<usize>(), 0..8usize, 0..3usize, -50i64..1000).prop_map(|(g, cpu, item, delta)| Op::Update { g, cpu, item, delta }),
        2 => any::<usize>().prop_map(|g| Op::Remove { g }),
        3 => any::<usize>().prop_map(|g| Op::Read { g }),
        1 => any::<usize>().prop_map(|g| Op::Lookup { g }),
        1 => any::<usize>().prop_map(|g| Op::DropHandle { g }),
    ]
}

struct ModelGroup {
    parent: Option<usize>,
    alive: bool,
    own: [i64; 3],
    path: String,
    handle: Option<Group>,
}

fn hier(model: &[ModelGroup], g: usize) -> [i64; 3] {
    let mut t = model[g].own;
    for m in model {
        // m is a descendant of g if g is on its parent chain
        let mut p = m.parent;
        while let Some(x) = p {
            if x == g {
                for (tk, ok) in t.iter_mut().zip(m.own) {
                    *tk += ok;
                }
                break;
            }
            p = model[x].parent;
        }
    }
    t
}

fn run(ops: Vec<Op>, nr_cpus: usize, unified: bool) -> Result<(), TestCaseError> {
    let rs = Rstat::builder()
        .nr_cpus(nr_cpus)
        .unified(unified)
        .build()
        .unwrap();
    let ctl = rs.register_counters("m", &["a", "b", "c"]).unwrap();
    let mut model = vec![ModelGroup {
        parent: None,
        alive: true,
        own: [0; 3],
        path: "/".to_owned(),
        handle: Some(rs.root().clone()),
    }];
    let mut next_name = 0;
    for op in ops {
        let n = model.len();
        match op {
            Op::Create { parent } => {
                let p = parent % n;
                let Some(h) = model[p].handle.clone() else {
                    continue;
                };
                let name = format!("g{next_name}");
                next_name += 1;
                let r = h.create_child(&name);
                if model[p].alive {
                    let child = r.map_err(|e| TestCaseError::fail(e.to_string()))?;
                    let path = if model[p].path == "/" {
                        format!("/{name}")
                    } else {
                        format!("{}/{name}", model[p].path)
                    };
                    prop_assert_eq!(child.path(), path.clone());
                    model.push(ModelGroup {
                        parent: Some(p),
                        alive: true,
                        own: [0; 3],
                        path,
                        handle: Some(child),
                    });
                } else {
                    prop_assert!(matches!(r, Err(Error::Removed { .. })), "expected Removed");
                }
            }
            Op::Update {
                g,
                cpu,
                item,
                delta,
            } => {
                let g = g % n;
                let Some(h) = model[g].handle.clone() else {
                    continue;
                };
                ctl.add_on_cpu(&h, cpu, item, delta)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                model[g].own[item] += delta;
            }
            Op::Remove { g } => {
                let g = g % n;
                let Some(h) = model[g].handle.clone() else {
                    continue;
                };
                let live_children = model
                    .iter()
                    .filter(|m| m.parent == Some(g) && m.alive)
                    .count();
                let r = h.remove();
                if g == 0 {
                    prop_assert!(
                        matches!(r, Err(Error::RootNotRemovable)),
                        "expected RootNotRemovable"
                    );
                } else if !model[g].alive {
                    prop_assert!(matches!(r, Err(Error::Removed { .. })), "expected Removed");
                } else if live_children > 0 {
                    prop_assert!(
                        matches!(r, Err(Error::HasChildren { .. })),
                        "expected HasChildren, got {:?}",
                        r
                    );
                } else {
                    prop_assert!(r.is_ok());
                    model[g].alive = false;
                }
            }
            Op::Read { g } => {
                let g = g % n;
                let Some(h) = model[g].handle.clone() else {
                    continue;
                };
                let s = ctl
                    .read_exact(&h)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(s.local(), &model[g].own[..], "local of {}", model[g].path);
                prop_assert_eq!(
                    s.hierarchical(),
                    &hier(&model, g)[..],
                    "hierarchical of {}",
                    model[g].path
                );
            }
            Op::Lookup { g } => {
                let g = g % n;
                let r = rs.lookup(&model[g].path);
                let live_path = {
                    let mut x = Some(g);
                    let mut ok = true;
                    while let Some(i) = x {
                        ok &= model[i].alive;
                        x = model[i].parent;
                    }
                    ok
                };
                if live_path {
                    let found = r.map_err(|e| TestCaseError::fail(e.to_string()))?;
                    if let Some(h) = &model[g].handle {
                        prop_assert_eq!(&found, h);
                    }
                } else {
                    prop_assert!(
                        matches!(r, Err(Error::NotFound { .. })),
                        "expected NotFound"
                    );
                }
            }
            Op::DropHandle { g } => {
                let g = g % n;
                if g != 0 && !model[g].alive {
                    model[g].handle = None; // final release of a zombie
                }
            }
        }
    }
    // Nothing is ever lost: the root sees everything ever added.
    let s = ctl.read_exact(rs.root()).unwrap();
    prop_assert_eq!(s.hierarchical(), &hier(&model, 0)[..]);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: if cfg!(miri) { 4 } else { 256 }, ..ProptestConfig::default() })]

    #[test]
    fn engine_agrees_with_the_model(ops in prop::collection::vec(op(), 1..if cfg!(miri) { 40 } else { 120 }), nr_cpus in 1..5usize, unified: bool) {
        run(ops, nr_cpus, unified)?;
    }
}
