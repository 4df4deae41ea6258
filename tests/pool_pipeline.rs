//! A million packets through a three-thread pipeline (receive, middle, transmit) with random
//! burst sizes, random hand-offs and random drops, freed one by one or in bulk: no buffer is
//! ever handed out twice or lost, no frame is overwritten while a stage holds it, and the pool
//! is whole at the end (issue "Buffers that come home from other cores").
//!
//! The pool is small (1,024 buffers, so thread caches of at most 256) to keep it near
//! exhaustion: the receive stage runs dry and refills from buffers the other two stages sent
//! home. Every wait is bounded; a stuck stage fails with what it waited for.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use vfio_nic::platform::dma::{IdentityMapper, Packet, Pool, PoolConfig};

const PACKETS: u64 = 1_000_000;
const BUFFERS: usize = 1024;
/// How long any stage may wait for anything.
const PATIENCE: Duration = Duration::from_secs(60);

/// xorshift64: a different, fixed sequence per stage.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Which buffers some stage owns: set when the pool hands a buffer out, cleared just before it
/// is freed. A buffer handed out while set is a double hand-out.
struct Owners {
    iova: u64,
    buf_size: u64,
    owned: Vec<AtomicBool>,
}

impl Owners {
    fn index(&self, p: &Packet) -> usize {
        ((p.buf_iova() - self.iova) / self.buf_size) as usize
    }

    fn handed_out(&self, p: &Packet) {
        let i = self.index(p);
        assert!(
            !self.owned[i].swap(true, SeqCst),
            "buffer {i} handed out while a stage owns it"
        );
    }

    fn freeing(&self, p: &Packet) {
        let i = self.index(p);
        assert!(
            self.owned[i].swap(false, SeqCst),
            "buffer {i} freed but nobody owned it"
        );
    }
}

/// The frame of packet `seq`: its number, 8 bytes.
fn check(p: &Packet, last: &mut Option<u64>) {
    let seq = u64::from_le_bytes(p.data().try_into().expect("an 8-byte frame"));
    assert!(
        last.is_none_or(|l| seq > l),
        "packet {seq} after {last:?}: a frame was overwritten or reordered"
    );
    *last = Some(seq);
}

/// Frees `batch` at random: all in bulk, one by one, or half and half.
fn free_randomly(batch: Vec<Packet>, owners: &Owners, rng: &mut Rng) {
    for p in &batch {
        owners.freeing(p);
    }
    match rng.below(3) {
        0 => Pool::free_bulk(batch),
        1 => drop(batch),
        _ => {
            let mut batch = batch;
            let half = batch.split_off(batch.len() / 2);
            Pool::free_bulk(half);
            for p in batch {
                drop(p);
            }
        }
    }
}

/// Sends `batch` on in 1 to 3 pieces.
fn hand_off(mut batch: Vec<Packet>, to: &SyncSender<Vec<Packet>>, rng: &mut Rng) {
    while !batch.is_empty() {
        let cut = if rng.below(2) == 0 {
            batch.len()
        } else {
            1 + rng.below(batch.len() as u64) as usize
        };
        let rest = batch.split_off(cut);
        to.send(batch).expect("the next stage is gone");
        batch = rest;
    }
}

fn receive(pool: Pool, owners: Arc<Owners>, to: SyncSender<Vec<Packet>>) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut seq = 0u64;
    let mut dry_since: Option<Instant> = None;
    while seq < PACKETS {
        let want = (1 + rng.below(64)).min(PACKETS - seq) as usize;
        let mut batch = Vec::with_capacity(want);
        if pool.alloc_bulk(want, &mut batch) == 0 {
            let since = *dry_since.get_or_insert_with(Instant::now);
            assert!(
                since.elapsed() < PATIENCE,
                "receive: no buffer came home for {PATIENCE:?} ({:?})",
                pool.stats()
            );
            thread::yield_now();
            continue;
        }
        dry_since = None;
        for p in &mut batch {
            owners.handed_out(p);
            assert!(p.set_data(&seq.to_le_bytes()));
            seq += 1;
        }
        hand_off(batch, &to, &mut rng);
    }
}

/// Drops about one packet in eight, passes the rest on. Returns how many it dropped.
fn middle(from: Receiver<Vec<Packet>>, to: SyncSender<Vec<Packet>>, owners: Arc<Owners>) -> u64 {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (mut last, mut dropped) = (None, 0);
    loop {
        let batch = match from.recv_timeout(PATIENCE) {
            Ok(b) => b,
            Err(RecvTimeoutError::Disconnected) => return dropped,
            Err(RecvTimeoutError::Timeout) => {
                panic!("middle: nothing from receive in {PATIENCE:?}")
            }
        };
        let (mut keep, mut drop_now) = (Vec::new(), Vec::new());
        for p in batch {
            check(&p, &mut last);
            if rng.below(8) == 0 {
                drop_now.push(p);
            } else {
                keep.push(p);
            }
        }
        dropped += drop_now.len() as u64;
        free_randomly(drop_now, &owners, &mut rng);
        hand_off(keep, &to, &mut rng);
    }
}

/// Frees everything it gets ("transmitted"). Returns how many.
fn transmit(from: Receiver<Vec<Packet>>, owners: Arc<Owners>) -> u64 {
    let mut rng = Rng(0xd1b5_4a32_d192_ed03);
    let (mut last, mut sent) = (None, 0);
    loop {
        let batch = match from.recv_timeout(PATIENCE) {
            Ok(b) => b,
            Err(RecvTimeoutError::Disconnected) => return sent,
            Err(RecvTimeoutError::Timeout) => {
                panic!("transmit: nothing from middle in {PATIENCE:?}")
            }
        };
        for p in &batch {
            check(p, &mut last);
        }
        sent += batch.len() as u64;
        free_randomly(batch, &owners, &mut rng);
    }
}

#[test]
fn a_million_packets_through_three_threads_lose_and_double_nothing() {
    let pool = Pool::new(
        PoolConfig {
            buffers: BUFFERS,
            ..PoolConfig::default()
        },
        Arc::new(IdentityMapper),
    )
    .unwrap();
    let owners = Arc::new(Owners {
        iova: pool.iova(),
        buf_size: pool.buf_size() as u64,
        owned: (0..BUFFERS).map(|_| AtomicBool::new(false)).collect(),
    });
    let (to_mid, mid_in) = sync_channel(16);
    let (to_tx, tx_in) = sync_channel(16);
    let r = {
        let (pool, owners) = (pool.clone(), owners.clone());
        thread::spawn(move || receive(pool, owners, to_mid))
    };
    let m = {
        let owners = owners.clone();
        thread::spawn(move || middle(mid_in, to_tx, owners))
    };
    let t = {
        let owners = owners.clone();
        thread::spawn(move || transmit(tx_in, owners))
    };
    r.join().expect("receive stage");
    let dropped = m.join().expect("middle stage");
    let sent = t.join().expect("transmit stage");
    assert_eq!(dropped + sent, PACKETS, "every packet dropped or sent");
    assert!(
        dropped > PACKETS / 10 && sent > PACKETS / 2,
        "{dropped} {sent}"
    );

    // The stages exited, so their caches went home: the pool is whole.
    let s = pool.stats();
    assert_eq!((s.free, s.in_use), (BUFFERS, 0), "{s:?}");
    assert!(owners.owned.iter().all(|o| !o.load(SeqCst)));
    let mut all = Vec::new();
    assert_eq!(pool.alloc_bulk(BUFFERS, &mut all), BUFFERS);
    let mut offsets: Vec<u64> = all.iter().map(|p| p.buf_iova()).collect();
    offsets.sort_unstable();
    offsets.dedup();
    assert_eq!(offsets.len(), BUFFERS, "each buffer exactly once");
}
