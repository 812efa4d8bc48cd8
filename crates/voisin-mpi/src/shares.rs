//! GPU ranks' graph shares on the wire: each rank's share of the triangle
//! (`voisin_cuda::PartialGraph::to_bytes`) travels to rank 0 as `u32` words, the byte length
//! first, so that rank 0 can cut the gathered words back into one share per rank.
//!
//! Owns only the framing; what a share holds is voisin-cuda's.

use voisin::{Error, Result};

/// `bytes` as words: the length, then the bytes little-endian, the last word zero-padded.
pub fn pack(bytes: &[u8]) -> Vec<u32> {
    let mut words = Vec::with_capacity(2 + bytes.len() / 4);
    words.push(bytes.len() as u32);
    words.extend(bytes.chunks(4).map(|c| {
        let mut w = [0u8; 4];
        w[..c.len()].copy_from_slice(c);
        u32::from_le_bytes(w)
    }));
    words
}

/// Cuts the concatenation of packed buffers back into them, in order; a clear error on words
/// that do not frame.
pub fn unpack(words: &[u32]) -> Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < words.len() {
        let len = words[at] as usize;
        let body = words
            .get(at + 1..at + 1 + len.div_ceil(4))
            .ok_or_else(|| Error::device("graph shares arrived truncated (bug)"))?;
        let mut bytes: Vec<u8> = body.iter().flat_map(|w| w.to_le_bytes()).collect();
        bytes.truncate(len);
        out.push(bytes);
        at += 1 + len.div_ceil(4);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_buffers_come_back_whole_and_in_order() {
        let bufs: Vec<Vec<u8>> = (0..9usize)
            .map(|n| (0..n * 3).map(|i| (i * 7 + n) as u8).collect())
            .collect();
        let words: Vec<u32> = bufs.iter().flat_map(|b| pack(b)).collect();
        assert_eq!(unpack(&words).unwrap(), bufs);
        assert!(unpack(&[]).unwrap().is_empty());
        let mut cut = words.clone();
        cut.pop();
        assert!(unpack(&cut).is_err());
    }
}
