//! Moving `u32` buffers between ranks: the three collectives the drivers need, over MPI (feature
//! `mpi`), within one process ([`Single`]), or over threads standing in for ranks
//! ([`Threads`], for tests of whole runs without MPI).
//!
//! Every collective is entered by every rank in the same order, so a rank that fails must still
//! take part: the drivers call [`agree`] after each phase that can fail.

use std::sync::{Arc, Barrier, Mutex};

/// The collectives the drivers use.
pub trait Comm {
    /// This process's rank, 0 up to [`Comm::size`].
    fn rank(&self) -> usize;
    /// How many ranks there are.
    fn size(&self) -> usize;
    /// Sends `buffers[d]` to rank `d`; returns what every rank sent here, in rank order.
    fn all_to_all(&self, buffers: Vec<Vec<u32>>) -> Vec<u32>;
    /// Every rank's `data`, concatenated in rank order, at rank 0; `None` on other ranks.
    fn gather(&self, data: Vec<u32>) -> Option<Vec<u32>>;
    /// The largest of every rank's `value`.
    fn all_max(&self, value: u32) -> u32;
    /// Whether `ok` holds on every rank.
    fn all_ok(&self, ok: bool) -> bool {
        self.all_max(u32::from(!ok)) == 0
    }
}

/// A phase that failed somewhere, as one rank sees it after [`agree`].
#[derive(Debug)]
pub struct Failed {
    /// This rank's own error; `None` when only other ranks failed (they report theirs).
    pub error: Option<voisin::Error>,
    /// The exit code every rank agreed on: 2 when any rank met bad input, 1 otherwise.
    pub code: i32,
}

/// Turns a phase's outcome into one every rank agrees on, so no rank waits in a collective that
/// a failed rank will never enter, and every rank ends with the same exit code.
pub fn agree<T>(comm: &dyn Comm, r: voisin::Result<T>) -> Result<T, Failed> {
    let mine = match &r {
        Ok(_) => 0,
        Err(e) if e.is_user_error() => 2,
        Err(_) => 1,
    };
    let code = comm.all_max(mine) as i32;
    match r {
        Ok(v) if code == 0 => Ok(v),
        Ok(_) => Err(Failed { error: None, code }),
        Err(e) => Err(Failed {
            error: Some(e),
            code,
        }),
    }
}

/// Ranks as threads of one process: `Threads::world(n)` gives one handle per rank, each to be
/// used from its own thread. Lets tests run whole drivers, rank by rank, without MPI.
pub struct Threads {
    rank: usize,
    shared: Arc<Shared>,
}

struct Shared {
    size: usize,
    barrier: Barrier,
    /// `boxes[from][to]`: what `from` sent to `to` in the collective under way.
    boxes: Mutex<Vec<Vec<Vec<u32>>>>,
    values: Mutex<Vec<u32>>,
}

impl Threads {
    /// One communicator per rank of a world of `size` ranks, for threads of one process.
    pub fn world(size: usize) -> Vec<Threads> {
        let shared = Arc::new(Shared {
            size,
            barrier: Barrier::new(size),
            boxes: Mutex::new(vec![vec![Vec::new(); size]; size]),
            values: Mutex::new(vec![0; size]),
        });
        (0..size)
            .map(|rank| Threads {
                rank,
                shared: shared.clone(),
            })
            .collect()
    }
}

impl Comm for Threads {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.shared.size
    }
    fn all_to_all(&self, buffers: Vec<Vec<u32>>) -> Vec<u32> {
        assert_eq!(buffers.len(), self.shared.size, "one buffer per rank");
        self.shared.boxes.lock().expect("comm lock")[self.rank] = buffers;
        self.shared.barrier.wait();
        let got = {
            let mut boxes = self.shared.boxes.lock().expect("comm lock");
            boxes
                .iter_mut()
                .flat_map(|from| std::mem::take(&mut from[self.rank]))
                .collect()
        };
        // Nobody may post the next collective's buffers before everyone has read these.
        self.shared.barrier.wait();
        got
    }
    fn gather(&self, data: Vec<u32>) -> Option<Vec<u32>> {
        let mut buffers = vec![Vec::new(); self.shared.size];
        buffers[0] = data;
        let got = self.all_to_all(buffers);
        (self.rank == 0).then_some(got)
    }
    fn all_max(&self, value: u32) -> u32 {
        self.shared.values.lock().expect("comm lock")[self.rank] = value;
        self.shared.barrier.wait();
        let max = *self
            .shared
            .values
            .lock()
            .expect("comm lock")
            .iter()
            .max()
            .expect("at least one rank");
        self.shared.barrier.wait();
        max
    }
}

/// One process, no MPI: the whole job is rank 0 of 1.
pub struct Single;

impl Comm for Single {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn all_to_all(&self, buffers: Vec<Vec<u32>>) -> Vec<u32> {
        buffers.into_iter().flatten().collect()
    }
    fn gather(&self, data: Vec<u32>) -> Option<Vec<u32>> {
        Some(data)
    }
    fn all_max(&self, value: u32) -> u32 {
        value
    }
}

#[cfg(feature = "mpi")]
pub use self::mpi_comm::Mpi;

#[cfg(feature = "mpi")]
mod mpi_comm {
    use mpi::collective::SystemOperation;
    use mpi::datatype::{Partition, PartitionMut};
    use mpi::topology::SimpleCommunicator;
    use mpi::traits::*;
    use mpi::Count;

    use super::Comm;

    /// The world communicator of an MPI job.
    pub struct Mpi {
        /// Every rank of the job, as `mpi::initialize` gave it.
        pub world: SimpleCommunicator,
    }

    /// MPI counts are C ints: a message past 2^31 − 1 values cannot be described.
    fn count(n: usize) -> Count {
        Count::try_from(n).expect("message larger than MPI's 2^31 - 1 element limit")
    }

    fn displacements(counts: &[Count]) -> Vec<Count> {
        counts
            .iter()
            .scan(0, |at, &c| {
                let d = *at;
                *at += c;
                Some(d)
            })
            .collect()
    }

    impl Comm for Mpi {
        fn rank(&self) -> usize {
            self.world.rank() as usize
        }

        fn size(&self) -> usize {
            self.world.size() as usize
        }

        fn all_to_all(&self, buffers: Vec<Vec<u32>>) -> Vec<u32> {
            let send_counts: Vec<Count> = buffers.iter().map(|b| count(b.len())).collect();
            let mut recv_counts = vec![0 as Count; self.size()];
            self.world
                .all_to_all_into(&send_counts[..], &mut recv_counts[..]);
            let send: Vec<u32> = buffers.into_iter().flatten().collect();
            let total: usize = recv_counts.iter().map(|&c| c as usize).sum();
            let mut recv = vec![0u32; total];
            let send_displs = displacements(&send_counts);
            let recv_displs = displacements(&recv_counts);
            let sp = Partition::new(&send[..], &send_counts[..], &send_displs[..]);
            let mut rp = PartitionMut::new(&mut recv[..], &recv_counts[..], &recv_displs[..]);
            self.world.all_to_all_varcount_into(&sp, &mut rp);
            recv
        }

        fn gather(&self, data: Vec<u32>) -> Option<Vec<u32>> {
            let root = self.world.process_at_rank(0);
            let n = count(data.len());
            if self.world.rank() != 0 {
                root.gather_into(&n);
                root.gather_varcount_into(&data[..]);
                return None;
            }
            let mut counts = vec![0 as Count; self.size()];
            root.gather_into_root(&n, &mut counts[..]);
            let total: usize = counts.iter().map(|&c| c as usize).sum();
            let mut all = vec![0u32; total];
            let displs = displacements(&counts);
            let mut part = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
            root.gather_varcount_into_root(&data[..], &mut part);
            Some(all)
        }

        fn all_max(&self, value: u32) -> u32 {
            let mut max = 0u32;
            self.world
                .all_reduce_into(&value, &mut max, SystemOperation::max());
            max
        }
    }
}
