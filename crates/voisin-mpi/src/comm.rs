//! Moving `u32` buffers between ranks: the three collectives the drivers need, over MPI (feature
//! `mpi`) or within one process.
//!
//! Every collective is entered by every rank in the same order, so a rank that fails must still
//! take part: the drivers call [`Comm::all_ok`] after each phase that can fail.

/// The collectives the drivers use.
pub trait Comm {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    /// Sends `buffers[d]` to rank `d`; returns what every rank sent here, in rank order.
    fn all_to_all(&self, buffers: Vec<Vec<u32>>) -> Vec<u32>;
    /// Every rank's `data`, concatenated in rank order, at rank 0; `None` on other ranks.
    fn gather(&self, data: Vec<u32>) -> Option<Vec<u32>>;
    /// Whether `ok` holds on every rank.
    fn all_ok(&self, ok: bool) -> bool;
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
    fn all_ok(&self, ok: bool) -> bool {
        ok
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

        fn all_ok(&self, ok: bool) -> bool {
            let mut all = 0i32;
            self.world
                .all_reduce_into(&(ok as i32), &mut all, SystemOperation::min());
            all == 1
        }
    }
}
