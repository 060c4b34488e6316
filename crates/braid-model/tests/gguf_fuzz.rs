//! Model files that lie: a GGUF whose header, metadata or tensor table was damaged or forged
//! must load or be refused with an error, never panic, abort or take memory out of proportion
//! to the file. Each case damages a tiny model (seeded, so every run tries the same cases)
//! and loads it; an allocator that counts the peak of live bytes checks the memory.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use braid_model::tiny_gguf::{Arch, TinyModel};
use braid_model::LoadedModel;
use candle_core::quantized::gguf_file::{Content, Value};
use rand::{Rng, SeedableRng};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator and only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as allocated above.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// More than any of these loads needs: the tiny model is well under a megabyte.
const MEMORY_BOUND: usize = 256 << 20;

/// The counters are the process's: the tests take turns, so that one's allocations are not
/// counted in the other's loads.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Loads `path`; `Err` with the panic's message if loading panicked. Checks the memory.
fn load(path: &Path) -> Result<Result<(), String>, String> {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let outcome = std::panic::catch_unwind(|| LoadedModel::load(path).map(drop));
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(before);
    assert!(peak < MEMORY_BOUND, "loading took {peak} bytes");
    match outcome {
        Ok(result) => Ok(result.map_err(|e| e.to_string())),
        Err(panic) => Err(panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()),
    }
}

fn tiny(dir: &Path, name: &str, edit: impl FnOnce(&mut TinyModel)) -> std::path::PathBuf {
    let mut m = TinyModel::arch(Arch::Llama, 7).unwrap();
    edit(&mut m);
    let path = dir.join(name);
    m.write(&path).unwrap();
    path
}

fn set(m: &mut TinyModel, key: &str, value: Value) {
    m.metadata.retain(|(k, _)| k != key);
    m.metadata.push((key.to_string(), value));
}

/// The lies found by review, each refused by name.
#[test]
fn forged_sizes_are_refused_naming_the_field() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, Value, &str); 5] = [
        ("general.alignment", Value::U32(0), "general.alignment is 0"),
        (
            "llama.context_length",
            Value::U64(1 << 40),
            "llama.context_length` is 1099511627776",
        ),
        (
            "llama.block_count",
            Value::U64(1 << 31),
            "llama.block_count` is 2147483648",
        ),
        (
            "llama.embedding_length",
            Value::U64(1 << 40),
            "llama.embedding_length` is",
        ),
        (
            "llama.attention.head_count",
            Value::U32(1 << 30),
            "llama.attention.head_count` is",
        ),
    ];
    for (key, value, says) in cases {
        let path = tiny(dir.path(), "forged.gguf", |m| set(m, key, value));
        let err = load(&path).expect("no panic").expect_err(key);
        assert!(
            err.contains(says) && err.contains("forged.gguf"),
            "{key}: {err}"
        );
    }
    // A u8 array of 20 million entries, present in the file (so within its size), which
    // candle would hold as 20 million 32-byte values.
    let path = dir.path().join("array.gguf");
    let key = b"general.junk";
    let mut b = Vec::new();
    b.extend_from_slice(b"GGUF");
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes()); // tensors
    b.extend_from_slice(&1u64.to_le_bytes()); // metadata entries
    b.extend_from_slice(&(key.len() as u64).to_le_bytes());
    b.extend_from_slice(key);
    b.extend_from_slice(&9u32.to_le_bytes()); // an array
    b.extend_from_slice(&0u32.to_le_bytes()); // of u8
    b.extend_from_slice(&20_000_000u64.to_le_bytes());
    b.resize(b.len() + 20_000_000, 7);
    std::fs::write(&path, &b).unwrap();
    let err = load(&path).expect("no panic").expect_err("a huge array");
    assert!(
        err.contains("general.junk") && err.contains("20000000 entries"),
        "{err}"
    );
}

/// Seeded random damage to the bytes before the tensor data: flipped bytes, huge counts and
/// lengths written over fields, and truncation.
#[test]
fn damaged_headers_load_or_are_refused_never_crash() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let base = tiny(dir.path(), "base.gguf", |_| {});
    let bytes = std::fs::read(&base).unwrap();
    let data_start = {
        let mut f = std::fs::File::open(&base).unwrap();
        Content::read(&mut f).unwrap().tensor_data_offset as usize
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(2026);
    let path = dir.path().join("damaged.gguf");
    let (mut refused, mut loaded) = (0, 0);
    for case in 0..1500 {
        let mut b = bytes.clone();
        match case % 3 {
            0 => {
                for _ in 0..rng.random_range(1..=4) {
                    let at = rng.random_range(0..data_start);
                    b[at] = rng.random();
                }
            }
            1 => {
                let huge = [u64::MAX, 1 << 40, 1 << 63, 0, 1 << 32, 0xFFFF_FFFF];
                let at = rng.random_range(0..data_start - 8);
                let v = huge[rng.random_range(0..huge.len())];
                b[at..at + 8].copy_from_slice(&v.to_le_bytes());
            }
            _ => b.truncate(rng.random_range(0..b.len())),
        }
        std::fs::write(&path, &b).unwrap();
        match load(&path) {
            Ok(Ok(())) => loaded += 1,
            Ok(Err(message)) => {
                assert!(message.contains("damaged.gguf"), "case {case}: {message}");
                refused += 1;
            }
            Err(panic) => panic!("case {case}: loading panicked: {panic}"),
        }
    }
    assert!(refused > 750, "{refused} refused, {loaded} loaded");
}
