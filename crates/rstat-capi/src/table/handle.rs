//! A handle's bits (kind, slot index, generation) and where each slot's
//! generations start: the per-process random key. The lowest file of the
//! table: [`slots`](super::slots) checks handles with these, and nothing
//! here knows what an entry holds.

const KIND_BITS: u32 = 4;
const INDEX_BITS: u32 = 28;
/// Slots the table can hold (2^28).
pub(crate) const MAX_SLOTS: usize = 1 << INDEX_BITS;

/// What a handle stands for. The values are the handle's low four bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Engine = 1,
    Group = 2,
    Counters = 3,
}

impl Kind {
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Engine => "an rstat",
            Kind::Group => "a group",
            Kind::Counters => "a counter set",
        }
    }
}

pub(super) fn encode(kind: Kind, index: usize, generation: u32) -> usize {
    (kind as usize) | (index << KIND_BITS) | ((generation as usize) << 32)
}

pub(super) fn decode(h: usize) -> (usize, usize, u32) {
    (
        h & ((1 << KIND_BITS) - 1),
        (h >> KIND_BITS) & (MAX_SLOTS - 1),
        (h >> 32) as u32,
    )
}

/// A per-process random key: `getrandom(2)`, or if the kernel refuses it
/// (no such call, a seccomp filter), std's own randomly keyed hasher over
/// the clock, the process id and a stack address.
pub(super) fn random_key() -> u64 {
    let mut buf = [0u8; 8];
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: `buf[filled..]` is valid for `buf.len() - filled` bytes
        // of writes; getrandom writes at most that many.
        let n =
            unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), buf.len() - filled, 0) };
        if n > 0 {
            filled += n as usize;
        } else if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            use std::hash::BuildHasher;
            let here = 0u8;
            return std::collections::hash_map::RandomState::new().hash_one((
                std::time::SystemTime::now(),
                std::process::id(),
                std::ptr::addr_of!(here) as usize,
            ));
        }
    }
    u64::from_ne_bytes(buf)
}

/// The first generation of slot `index` under `key`: the high half of the
/// splitmix64 finalizer of key + index × the golden ratio (a bijection of
/// the 64-bit input, so slots' starts are independent-looking and cheap).
pub(super) fn first_generation(key: u64, index: usize) -> u32 {
    let mut z = key.wrapping_add((index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) >> 32) as u32
}

/// The handle of a live entry as the C pointer type it travels in.
pub(crate) fn to_ptr<T>(h: usize) -> *mut T {
    // An integer carried in a pointer type, never dereferenced (the table's
    // module docs); `without_provenance` says exactly that.
    std::ptr::without_provenance_mut(h)
}
