use std::sync::Arc;

use ::rstat::Rstat;

use super::entry::{Engine, Entry};
use super::handle::{decode, encode, first_generation, random_key, Kind, MAX_SLOTS};
use super::slots::Table;
use crate::error::{RSTAT_EBADF, RSTAT_EPROTOTYPE};

#[test]
fn encoding_round_trips_and_is_never_null() {
    for (kind, index, gen) in [
        (Kind::Engine, 0, 0),
        (Kind::Group, MAX_SLOTS - 1, u32::MAX),
        (Kind::Counters, 12345, 7),
    ] {
        let h = encode(kind, index, gen);
        assert_ne!(h, 0);
        assert_eq!(decode(h), (kind as usize, index, gen));
    }
}

#[test]
fn a_released_slot_is_reused_with_a_new_generation_and_retired_at_wrap() {
    let engine = Arc::new(Engine::new(
        Rstat::builder().periodic_flush(None).build().unwrap(),
        None,
    ));
    let mut t = Table::new(Some(0x1234_5678_9abc_def0));
    let cpu = 0;
    let a = t
        .insert(Entry::Engine {
            engine: engine.clone(),
            cpu,
        })
        .unwrap();
    assert!(t.remove(a).is_some());
    assert!(t.remove(a).is_none(), "a stale handle removes nothing");
    let b = t
        .insert(Entry::Engine {
            engine: engine.clone(),
            cpu,
        })
        .unwrap();
    assert_ne!(a, b);
    assert_eq!(decode(a).1, decode(b).1, "same slot, reused");
    assert_eq!(t.get(a, Kind::Engine, "x").err().unwrap().code, RSTAT_EBADF);
    assert!(t.get(b, Kind::Engine, "x").is_ok());
    assert_eq!(
        t.get(b, Kind::Group, "x").err().unwrap().code,
        RSTAT_EPROTOTYPE
    );
    // Force the generation to the last one before it comes back to the
    // slot's start: releasing retires the slot.
    let (_, i, _) = decode(b);
    let last = t.slots[i].start.wrapping_sub(1);
    t.slots[i].generation = last;
    let c = encode(Kind::Engine, i, last);
    assert!(t.remove(c).is_some());
    assert!(
        t.free.is_empty(),
        "a slot at the last generation is retired"
    );
    let d = t.insert(Entry::Engine { engine, cpu }).unwrap();
    assert_ne!(decode(d).1, i);
    assert_eq!(t.len(), 1);
}

#[test]
fn first_generations_come_from_the_key_and_wrap_is_counted_from_there() {
    // Two keys give different first generations to the same slot, and
    // slot 0 under a key is not generation 0 (the predictable value).
    let (a, b) = (first_generation(1, 0), first_generation(2, 0));
    assert_ne!(a, b);
    assert_ne!(first_generation(1, 0), 0);
    // A slot whose start is 0 still reaches u32::MAX and wraps past
    // it (the old `checked_add` rule would have retired it there).
    let mut t = Table::new(Some(7));
    let engine = Arc::new(Engine::new(
        Rstat::builder().periodic_flush(None).build().unwrap(),
        None,
    ));
    let h = t
        .insert(Entry::Engine {
            engine: engine.clone(),
            cpu: 0,
        })
        .unwrap();
    let (_, i, g) = decode(h);
    assert_eq!(g, first_generation(7, 0));
    t.slots[i].start = 5;
    t.slots[i].generation = u32::MAX;
    assert!(t.remove(encode(Kind::Engine, i, u32::MAX)).is_some());
    assert_eq!(t.slots[i].generation, 0, "wraps through 0");
    assert_eq!(t.free.len(), 1, "not retired before its start");
}

#[test]
fn the_random_key_is_random() {
    // Two draws equal with probability 2^-64; all zeros would mean
    // getrandom wrote nothing.
    let (a, b) = (random_key(), random_key());
    assert_ne!(a, b);
    assert_ne!(a, 0);
}
