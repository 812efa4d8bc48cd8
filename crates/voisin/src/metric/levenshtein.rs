//! Edit distance (insertions, deletions, substitutions, each of cost 1) over Unicode scalar
//! values.

/// Edit distance between `a` and `b`.
pub fn distance(a: &[char], b: &[char]) -> usize {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0usize; b.len() + 1];
    for (i, &ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// Edit distance if it is at most `max`, `None` otherwise. Cheaper than [`distance`] when
/// `max` is small: the length difference alone often decides.
pub fn bounded(a: &[char], b: &[char], max: usize) -> Option<usize> {
    if a.len().abs_diff(b.len()) > max {
        return None;
    }
    let d = distance(a, b);
    (d <= max).then_some(d)
}
