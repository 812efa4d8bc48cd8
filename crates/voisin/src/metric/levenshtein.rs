//! Edit distance (insertions, deletions, substitutions, each of cost 1) over Unicode scalar
//! values, computed bit-parallel.
//!
//! The algorithm is Myers' (1999) bit-vector dynamic programme in Hyyrö's formulation for the
//! global distance: one column of the DP matrix is held as two bit vectors of vertical deltas
//! (+1 and −1 between consecutive rows), and a whole column is advanced with a dozen word
//! operations per 64 pattern characters. Patterns longer than 64 characters are split into
//! 64-bit blocks processed top to bottom, each passing the horizontal delta of its last row to
//! the next block (Myers' block-based variant). The top row of the matrix is 0, 1, 2, …, so the
//! first block always receives a horizontal delta of +1.
//!
//! Per-character match masks ("peq") are built once per pattern: a 128-entry table for ASCII
//! and a sorted list for other characters, never a table over all of Unicode.
//!
//! [`Pattern`] holds a preprocessed query for searching one string against many; the free
//! functions build their masks on the stack for patterns up to 64 chars. [`bounded`] and
//! [`Pattern::bounded`] stop early (length difference, a monotone-diagonal cut-off, Ukkonen's
//! band over blocks). This module owns the distance only; it must not know about data sets,
//! engines or indexes.

/// Bits per block of the pattern.
const W: usize = 64;

/// A preprocessed string: its match masks, built once and reused against many texts.
#[derive(Clone, Debug)]
pub struct Pattern {
    len: usize,
    /// The pattern itself: an equal text is answered 0 without a scan (a 1 MiB line compared
    /// with its duplicate would otherwise cost a full bit-parallel pass).
    chars: Vec<char>,
    /// Blocks of 64 pattern characters (0 for the empty pattern).
    blocks: usize,
    /// `ascii[c · blocks + b]`: bit i set when pattern char `64·b + i` is the ASCII char `c`.
    ascii: Vec<u64>,
    /// Non-ASCII chars of the pattern, sorted, each with the offset of its masks in `masks`.
    other: Vec<(char, usize)>,
    masks: Vec<u64>,
    /// All-zero masks for chars not in the pattern.
    zeros: Vec<u64>,
    /// Bit c set when the ASCII char c occurs in the pattern (the others are in `other`).
    ascii_present: u128,
}

impl Pattern {
    /// Builds the match masks of `pattern`, once for all the texts it is compared with.
    pub fn new(pattern: &[char]) -> Pattern {
        let blocks = pattern.len().div_ceil(W);
        let mut ascii = vec![0u64; 128 * blocks];
        let mut others: Vec<char> = pattern.iter().copied().filter(|c| !c.is_ascii()).collect();
        others.sort_unstable();
        others.dedup();
        let other: Vec<(char, usize)> = others
            .into_iter()
            .enumerate()
            .map(|(i, c)| (c, i * blocks))
            .collect();
        let mut masks = vec![0u64; other.len() * blocks];
        let mut ascii_present = 0u128;
        for (i, &c) in pattern.iter().enumerate() {
            let (b, bit) = (i / W, 1u64 << (i % W));
            if c.is_ascii() {
                ascii[c as usize * blocks + b] |= bit;
                ascii_present |= 1 << c as u32;
            } else {
                let k = other.binary_search_by_key(&c, |e| e.0).expect("collected");
                masks[other[k].1 + b] |= bit;
            }
        }
        Pattern {
            len: pattern.len(),
            chars: pattern.to_vec(),
            blocks,
            ascii,
            other,
            masks,
            zeros: vec![0u64; blocks],
            ascii_present,
        }
    }

    /// Whether `c` occurs in the pattern.
    #[inline]
    fn has(&self, c: char) -> bool {
        if c.is_ascii() {
            self.ascii_present >> c as u32 & 1 == 1
        } else {
            self.other.binary_search_by_key(&c, |e| e.0).is_ok()
        }
    }

    /// A lower bound on the distance to `text` from the chars they share: an alignment of
    /// `u` matches costs at least max(m, n) − u (every other char of the longer string is
    /// substituted or deleted), and a match pairs a text char that occurs in the pattern. When
    /// none does, the bound is the distance itself (max(m, n) substitutions and deletions do
    /// it). One lookup per text char: worth it where the dynamic programme costs many blocks
    /// per char (a 1 MiB line against words of another alphabet, issue 14).
    fn shared_bound(&self, text: &[char]) -> (usize, bool) {
        let shared = text.iter().filter(|&&c| self.has(c)).count();
        (self.len.max(text.len()) - shared, shared == 0)
    }

    /// Pattern length in chars.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the pattern has no chars.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The match masks of `c`, one word per block.
    #[inline]
    fn peq(&self, c: char) -> &[u64] {
        let b = self.blocks;
        if c.is_ascii() {
            let at = c as usize * b;
            return &self.ascii[at..at + b];
        }
        match self.other.binary_search_by_key(&c, |e| e.0) {
            Ok(k) => &self.masks[self.other[k].1..][..b],
            Err(_) => &self.zeros,
        }
    }

    /// Edit distance between the pattern and `text`.
    pub fn distance(&self, text: &[char]) -> usize {
        self.run(text, usize::MAX)
            .expect("no cut-off without a bound")
    }

    /// Edit distance to `text` if it is at most `max`, `None` otherwise.
    ///
    /// Cheap rejections, in order: the length difference (a lower bound on the distance), then
    /// a cut-off during the scan. The cells on the diagonal that ends in the final cell never
    /// decrease (`D[i+1][j+1] ≥ D[i][j]`), so as soon as the diagonal cell of the current column
    /// exceeds `max` the final distance does too and the scan stops. That cell is read from the
    /// column's bit vectors with two popcounts, so a dissimilar pair costs about
    /// `max / (rate of mismatches)` columns instead of the whole text. Patterns over 64 chars
    /// also advance only the 64-row blocks inside Ukkonen's band |i − j| ≤ max, so similar
    /// long strings cost about ⌈(2·max + 1)/64⌉ + 1 blocks per column instead of all of them.
    /// Bounds of at most [`TRIM_MAX`] are decided by [`within_trimmed`] without a scan.
    pub fn bounded(&self, text: &[char], max: usize) -> Option<usize> {
        if self.len.abs_diff(text.len()) > max {
            return None;
        }
        if max <= TRIM_MAX {
            return within_trimmed(&self.chars, text, max);
        }
        self.run(text, max)
    }

    /// The scan, with the diagonal cut-off active unless `max == usize::MAX`.
    fn run(&self, text: &[char], max: usize) -> Option<usize> {
        let (m, n) = (self.len, text.len());
        if m == 0 {
            return (n <= max).then_some(n);
        }
        if text == self.chars.as_slice() {
            return Some(0);
        }
        if self.blocks > 1 {
            // Before the subsequence test, which scans the longer string when it fails.
            match self.shared_bound(text) {
                (d, true) => return (d <= max).then_some(d),
                (low, false) if low > max => return None,
                _ => {}
            }
        }
        if let Some(d) = embedded(&self.chars, text) {
            return (d <= max).then_some(d);
        }
        if self.blocks == 1 {
            self.run_single(text, max)
        } else {
            self.run_blocks(text, max)
        }
    }

    /// Patterns of at most 64 chars: the column fits one word.
    fn run_single(&self, text: &[char], max: usize) -> Option<usize> {
        scan_single(self.len, text, max, |c| self.peq(c)[0])
    }

    /// Longer patterns: blocks top to bottom, each handing its bottom horizontal delta on.
    ///
    /// With a bound, only the blocks that meet Ukkonen's band are advanced: in column j, rows
    /// below j + max and rows above j − max hold values over `max` (D[i][j] ≥ |i − j|), and no
    /// path of cost ≤ `max` passes through them. A block entering the band at the bottom starts
    /// from vertical deltas of +1, and once a block leaves it at the top the row below it is
    /// taken to grow by +1 per column. Both over-estimate cells whose true value is already
    /// over `max` and nothing else, so every cell of value ≤ `max` (the diagonal cells used by
    /// the cut-off and the final cell included) is still exact and every other stays over
    /// `max`.
    fn run_blocks(&self, text: &[char], max: usize) -> Option<usize> {
        #[cfg(target_arch = "x86_64")]
        if max != usize::MAX && std::arch::is_x86_feature_detected!("popcnt") {
            // SAFETY: the CPU has POPCNT, checked just above.
            return unsafe { self.run_blocks_popcnt(text, max) };
        }
        self.run_blocks_body(text, max)
    }

    /// [`Pattern::run_blocks_body`] compiled with POPCNT for the cut-off's counts.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "popcnt")]
    unsafe fn run_blocks_popcnt(&self, text: &[char], max: usize) -> Option<usize> {
        self.run_blocks_body(text, max)
    }

    #[inline(always)]
    fn run_blocks_body(&self, text: &[char], max: usize) -> Option<usize> {
        let (m, n, nb) = (self.len, text.len(), self.blocks);
        let mut cols = vec![Column { pv: !0, mv: 0 }; nb];
        // bottom[b] = D[last row of block b][current column] (for b < first: of the row above
        // the band, as assumed). Active blocks are first..last.
        let mut bottom: Vec<usize> = (0..nb).map(|b| (W * (b + 1)).min(m)).collect();
        let last_high = 1u64 << ((m - 1) % W);
        let (mut first, mut last) = (0, 1);
        for (j, &c) in text.iter().enumerate() {
            let col = j + 1;
            let needed = col.saturating_add(max).min(m).div_ceil(W);
            while last < needed {
                bottom[last] = bottom[last - 1] + ((W * (last + 1)).min(m) - W * last);
                last += 1;
            }
            first = first.max((col.saturating_sub(max.saturating_add(1)) / W).min(last - 1));
            let mut h = 1i32;
            if first > 0 {
                bottom[first - 1] += 1;
            }
            let peq = self.peq(c);
            for b in first..last {
                let high = if b + 1 == nb { last_high } else { 1 << (W - 1) };
                h = cols[b].advance(peq[b], h, high);
                bottom[b] = bottom[b].wrapping_add_signed(h as isize);
            }
            if max != usize::MAX {
                if let Some(row) = diagonal_row(m, n, col) {
                    let d = if row == 0 {
                        col
                    } else {
                        let b = (row - 1) / W;
                        let above = if b == 0 { col } else { bottom[b - 1] };
                        let r = row - W * b;
                        above + cols[b].prefix(r) - cols[b].prefix_neg(r)
                    };
                    if d > max {
                        return None;
                    }
                }
            }
        }
        // Callers reject |m − n| > max first, so the band reaches row m by the last column
        // (an empty text leaves the initial column, whose last value is m).
        debug_assert!(last == nb || n == 0);
        let score = bottom[nb - 1];
        (score <= max).then_some(score)
    }
}

/// Texts of at most this many chars are scanned to the end even under a bound: the diagonal
/// cut-off reads two bit counts a column, which costs more than it saves on short words (a
/// baseline x86-64 build counts bits in a dozen instructions).
const CUT_MIN_TEXT: usize = 2 * W;

/// The one-word scan (pattern of 1 to 64 chars), shared by [`Pattern`] and the
/// allocation-free path of [`distance`]: `peq(c)` is the match mask of text char `c`. The
/// diagonal cut-off is active unless `max == usize::MAX` or the text is short; it runs with
/// POPCNT where the CPU has it.
#[inline(always)]
fn scan_single(m: usize, text: &[char], max: usize, peq: impl Fn(char) -> u64) -> Option<usize> {
    if max == usize::MAX || text.len() <= CUT_MIN_TEXT {
        let d = scan_single_body(m, text, usize::MAX, peq).expect("no cut-off without a bound");
        return (d <= max).then_some(d);
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: the CPU has POPCNT, checked just above.
        return unsafe { scan_single_popcnt(m, text, max, peq) };
    }
    scan_single_body(m, text, max, peq)
}

/// [`scan_single_body`] compiled with POPCNT.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
unsafe fn scan_single_popcnt(
    m: usize,
    text: &[char],
    max: usize,
    peq: impl Fn(char) -> u64,
) -> Option<usize> {
    scan_single_body(m, text, max, peq)
}

#[inline(always)]
fn scan_single_body(
    m: usize,
    text: &[char],
    max: usize,
    peq: impl Fn(char) -> u64,
) -> Option<usize> {
    let n = text.len();
    let high = 1u64 << (m - 1);
    let mut col = Column { pv: !0, mv: 0 };
    let mut score = m;
    for (j, &c) in text.iter().enumerate() {
        let h = col.advance(peq(c), 1, high);
        score = score.wrapping_add_signed(h as isize);
        if max != usize::MAX {
            if let Some(row) = diagonal_row(m, n, j + 1) {
                if j + 1 + col.prefix(row) > max.saturating_add(col.prefix_neg(row)) {
                    return None;
                }
            }
        }
    }
    (score <= max).then_some(score)
}

/// The row of the diagonal through the final cell (m, n) in column `j`, if inside the matrix.
#[inline]
fn diagonal_row(m: usize, n: usize, j: usize) -> Option<usize> {
    (j + m).checked_sub(n)
}

/// One 64-row block of a DP column as vertical deltas: bit i of `pv` (`mv`) says the cell in
/// row i+1 is one more (one less) than the cell above it.
#[derive(Clone, Copy)]
struct Column {
    pv: u64,
    mv: u64,
}

impl Column {
    /// Advances the block by one text char with match mask `eq`, given the horizontal delta
    /// `hin` ∈ {−1, 0, +1} entering its top row; returns the delta leaving the row marked by
    /// `high`. A −1 entering is folded into the addition's carry (the `eq | 1`).
    #[inline(always)]
    fn advance(&mut self, eq: u64, hin: i32, high: u64) -> i32 {
        let (pv, mv) = (self.pv, self.mv);
        let hin_neg = u64::from(hin < 0);
        let hin_pos = u64::from(hin > 0);
        let xv = eq | mv;
        let eq = eq | hin_neg;
        let xh = ((eq & pv).wrapping_add(pv) ^ pv) | eq;
        let ph = mv | !(xh | pv);
        let mh = pv & xh;
        let hout = i32::from(ph & high != 0) - i32::from(mh & high != 0);
        let ph = (ph << 1) | hin_pos;
        let mh = (mh << 1) | hin_neg;
        self.pv = mh | !(xv | ph);
        self.mv = ph & xv;
        hout
    }

    /// Number of +1 deltas in the first `rows` rows of the block.
    #[inline(always)]
    fn prefix(&self, rows: usize) -> usize {
        (self.pv & low_bits(rows)).count_ones() as usize
    }

    /// Number of −1 deltas in the first `rows` rows of the block.
    #[inline(always)]
    fn prefix_neg(&self, rows: usize) -> usize {
        (self.mv & low_bits(rows)).count_ones() as usize
    }
}

#[inline(always)]
fn low_bits(rows: usize) -> u64 {
    if rows >= W {
        !0
    } else {
        (1u64 << rows) - 1
    }
}

/// Strings this much longer than the other are first tried by [`embedded`].
const EMBED_MIN_EXCESS: usize = 2 * W;

/// The distance of a long string and a much shorter one that is a subsequence of it: the length
/// difference, the lower bound of every pair, met by deleting the extra chars. Found by one
/// greedy scan that stops once the shorter string is embedded (after a few hundred chars of a
/// long text line, typically), where the DP would cost a full pass over the long string for
/// every pair: a 1 MiB line in a `.txt` made a graph take 104 s (issue 14). `None` when the
/// lengths are close (the DP is cheap) or the shorter is no subsequence.
fn embedded(a: &[char], b: &[char]) -> Option<usize> {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    let excess = long.len() - short.len();
    if excess < EMBED_MIN_EXCESS {
        return None;
    }
    let mut want = short.iter().peekable();
    for c in long {
        match want.peek() {
            None => break,
            Some(&w) if w == c => {
                want.next();
            }
            Some(_) => {}
        }
    }
    want.peek().is_none().then_some(excess)
}

/// The largest bound [`within_trimmed`] decides.
pub const TRIM_MAX: usize = 1;

/// Edit distance if it is at most `max` ≤ [`TRIM_MAX`], without a dynamic programme: once the
/// common prefix and suffix are removed, the two strings are within one edit exactly when
/// neither remainder is longer than one char, and the distance is then the longer remainder's
/// length. Why: two non-empty remainders differ in their first and in their last chars; one
/// substitution leaves every position but one equal, so both remainders have one char; one
/// insertion or deletion makes the longer remainder the shorter one with a char added, which
/// keeps either the first or the last chars equal unless the shorter remainder is empty. The
/// cost is one pass over the common ends, against a scan over every text char with a lookup
/// per char, and nothing to prepare.
fn within_trimmed(a: &[char], b: &[char], max: usize) -> Option<usize> {
    debug_assert!(max <= TRIM_MAX);
    let (a, b) = trim(a, b);
    let d = a.len().max(b.len());
    (d <= max).then_some(d)
}

/// Removes the common prefix and suffix, which never change the distance.
fn trim<'a>(a: &'a [char], b: &'a [char]) -> (&'a [char], &'a [char]) {
    let pre = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let (a, b) = (&a[pre..], &b[pre..]);
    let suf = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    (&a[..a.len() - suf], &b[..b.len() - suf])
}

/// The shorter string as the pattern (fewer blocks), after trimming common ends.
fn pattern_and_text<'a>(a: &'a [char], b: &'a [char]) -> (&'a [char], &'a [char]) {
    let (a, b) = trim(a, b);
    if a.len() <= b.len() {
        (a, b)
    } else {
        (b, a)
    }
}

/// Edit distance between `a` and `b`. To compare one string with many, build a [`Pattern`]
/// once instead.
pub fn distance(a: &[char], b: &[char]) -> usize {
    let (p, t) = pattern_and_text(a, b);
    one_shot(p, t, usize::MAX).expect("no cut-off without a bound")
}

/// One comparison without building a [`Pattern`] where that is cheaper: a pattern of at most
/// 64 chars gets its masks on the stack (an ASCII table, and a short list scanned linearly for
/// the other chars), so no allocation.
fn one_shot(p: &[char], t: &[char], max: usize) -> Option<usize> {
    if p.is_empty() {
        return (t.len() <= max).then_some(t.len());
    }
    if let Some(d) = embedded(p, t) {
        return (d <= max).then_some(d);
    }
    if p.len() > W {
        return Pattern::new(p).run(t, max);
    }
    let mut ascii = [0u64; 128];
    let mut other = [('\0', 0u64); W];
    let mut n_other = 0;
    for (i, &c) in p.iter().enumerate() {
        if c.is_ascii() {
            ascii[c as usize] |= 1 << i;
        } else if let Some(e) = other[..n_other].iter_mut().find(|e| e.0 == c) {
            e.1 |= 1 << i;
        } else {
            other[n_other] = (c, 1 << i);
            n_other += 1;
        }
    }
    let other = &other[..n_other];
    scan_single(p.len(), t, max, |c| {
        if c.is_ascii() {
            ascii[c as usize]
        } else {
            other.iter().find(|e| e.0 == c).map_or(0, |e| e.1)
        }
    })
}

/// Edit distance if it is at most `max`, `None` otherwise. The length difference is checked
/// first; bounds of at most [`TRIM_MAX`] are then decided by [`within_trimmed`]; larger ones
/// trim the common ends and scan with the diagonal cut-off of [`Pattern::bounded`].
pub fn bounded(a: &[char], b: &[char], max: usize) -> Option<usize> {
    if a.len().abs_diff(b.len()) > max {
        return None;
    }
    if max <= TRIM_MAX {
        return within_trimmed(a, b, max);
    }
    let (p, t) = pattern_and_text(a, b);
    one_shot(p, t, max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The textbook O(nm) dynamic programme, written independently as the yardstick.
    fn plain(a: &[char], b: &[char]) -> usize {
        let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
        for (i, row) in d.iter_mut().enumerate() {
            row[0] = i;
        }
        for (j, cell) in d[0].iter_mut().enumerate() {
            *cell = j;
        }
        for i in 1..=a.len() {
            for j in 1..=b.len() {
                let sub = d[i - 1][j - 1] + usize::from(a[i - 1] != b[j - 1]);
                d[i][j] = sub.min(d[i - 1][j] + 1).min(d[i][j - 1] + 1);
            }
        }
        d[a.len()][b.len()]
    }

    /// Checks every entry point on one pair, both ways round, against the plain DP.
    fn check(a: &[char], b: &[char]) {
        let want = plain(a, b);
        assert_eq!(distance(a, b), want, "distance {a:?} {b:?}");
        assert_eq!(Pattern::new(a).distance(b), want, "pattern {a:?} {b:?}");
        assert_eq!(Pattern::new(b).distance(a), want, "pattern {b:?} {a:?}");
        let limits = [
            0,
            1,
            2,
            want.saturating_sub(1),
            want,
            want + 1,
            usize::MAX - 1,
        ];
        for max in limits {
            let expect = (want <= max).then_some(want);
            assert_eq!(bounded(a, b, max), expect, "bounded {max} {a:?} {b:?}");
            assert_eq!(
                Pattern::new(a).bounded(b, max),
                expect,
                "P.bounded {max} {a:?} {b:?}"
            );
            assert_eq!(
                Pattern::new(b).bounded(a, max),
                expect,
                "P.bounded {max} {b:?} {a:?}"
            );
        }
    }

    fn string(alphabet: &'static [char], max_len: usize) -> impl Strategy<Value = Vec<char>> {
        prop::collection::vec(prop::sample::select(alphabet), 0..=max_len)
    }

    const SMALL: &[char] = &['a', 'b'];
    const MIXED: &[char] = &['a', 'b', 'c', 'é', 'e', 'ü', '中', '文', '😀', '\u{10FFFF}'];
    const FOREIGN: &[char] = &['X', 'Y', 'Z', '中', '😀'];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn short_strings_two_letters(a in string(SMALL, 12), b in string(SMALL, 12)) {
            check(&a, &b);
        }

        /// Lengths far apart: the subsequence path (when the short one embeds) and the DP
        /// (when it does not) against the plain DP.
        #[test]
        fn a_short_string_against_a_long_one(a in string(MIXED, 8), b in string(MIXED, 300)) {
            check(&a, &b);
        }

        #[test]
        fn non_ascii_strings(a in string(MIXED, 40), b in string(MIXED, 40)) {
            check(&a, &b);
        }

        #[test]
        fn long_strings_across_blocks(a in string(MIXED, 200), b in string(SMALL, 200)) {
            check(&a, &b);
        }

        /// Alphabets that share nothing or one char: the bound from shared chars answers
        /// (exactly when nothing is shared) or refuses before the scan, on patterns of
        /// several blocks, against texts shorter and longer than them.
        #[test]
        fn few_shared_chars(
            a in string(FOREIGN, 400),
            b in string(SMALL, 90),
            c in string(&['a', 'X', 'Y'], 90),
        ) {
            check(&a, &b);
            check(&a, &c);
            check(&b, &c);
        }

        #[test]
        fn near_copies_across_blocks(
            a in string(MIXED, 300),
            edits in prop::collection::vec((any::<prop::sample::Index>(), 0..3u8, prop::sample::select(MIXED)), 0..6),
        ) {
            // Similar strings exercise the paths where bounded must not cut off.
            check(&a, &edited(&a, edits));
        }

        /// Small cut-offs (0..=3, those [`within_trimmed`] decides and the first few the scan
        /// does) on strings a few edits apart, multibyte chars included, lengths 0..=200,
        /// against the plain DP; also [`within_trimmed`] itself.
        #[test]
        fn small_cutoffs_on_near_strings(
            a in string(MIXED, 200),
            edits in prop::collection::vec((any::<prop::sample::Index>(), 0..3u8, prop::sample::select(MIXED)), 0..4),
            max in 0..=3usize,
        ) {
            let b = edited(&a, edits);
            let want = plain(&a, &b);
            let expect = (want <= max).then_some(want);
            prop_assert_eq!(bounded(&a, &b, max), expect);
            prop_assert_eq!(bounded(&b, &a, max), expect);
            prop_assert_eq!(Pattern::new(&a).bounded(&b, max), expect);
            prop_assert_eq!(Pattern::new(&b).bounded(&a, max), expect);
            if max <= TRIM_MAX {
                prop_assert_eq!(within_trimmed(&a, &b, max), expect);
                prop_assert_eq!(within_trimmed(&b, &a, max), expect);
            }
        }
    }

    /// `a` after `edits`: (position, 0 substitute / 1 delete / 2 insert, char).
    fn edited(a: &[char], edits: Vec<(prop::sample::Index, u8, char)>) -> Vec<char> {
        let mut b = a.to_vec();
        for (at, kind, c) in edits {
            let i = if b.is_empty() { 0 } else { at.index(b.len()) };
            match kind {
                0 if !b.is_empty() => b[i] = c,
                1 if !b.is_empty() => {
                    b.remove(i);
                }
                _ => b.insert(i, c),
            }
        }
        b
    }

    #[test]
    fn block_boundary_lengths() {
        let lens = [0, 1, 63, 64, 65, 127, 128, 129, 300];
        let pick = |seed: usize, len: usize, alphabet: &[char]| -> Vec<char> {
            (0..len)
                .map(|i| alphabet[(i * 7 + seed * 13 + i * i * seed) % alphabet.len()])
                .collect()
        };
        for &la in &lens {
            for &lb in &lens {
                for seed in 0..3 {
                    let a = pick(seed, la, MIXED);
                    let b = pick(seed + 1, lb, SMALL);
                    check(&a, &b);
                    // A shifted copy keeps the pair similar across block boundaries.
                    let mut c = a.clone();
                    c.insert(la / 2, '中');
                    check(&a, &c);
                }
            }
        }
    }

    #[test]
    fn many_distinct_chars() {
        // Every pattern char distinct and non-ASCII: fills the stack list of `one_shot` (64)
        // and the sorted list of `Pattern` past one block.
        let cjk = |from: u32, len: u32| -> Vec<char> {
            (from..from + len)
                .map(|c| char::from_u32(c).expect("CJK"))
                .collect()
        };
        for len in [1, 63, 64, 65, 130] {
            let a = cjk(0x4E00, len);
            let mut b = cjk(0x4E00 + len / 3, len);
            b.reverse();
            check(&a, &b);
            let mut c = a.clone();
            c.swap(0, (len / 2) as usize);
            c.push('x');
            check(&a, &c);
        }
    }

    #[test]
    fn known_values() {
        let s = |x: &str| x.chars().collect::<Vec<char>>();
        assert_eq!(distance(&s("kitten"), &s("sitting")), 3);
        assert_eq!(distance(&s(""), &s("abc")), 3);
        assert_eq!(distance(&s("flaw"), &s("lawn")), 2);
        assert_eq!(distance(&s("café"), &s("cafe")), 1);
        assert_eq!(distance(&s("日本語"), &s("日本")), 1);
        assert_eq!(bounded(&s("kitten"), &s("sitting"), 2), None);
        assert_eq!(bounded(&s("abc"), &s("abcdef"), 2), None);
    }

    /// A line of 1 MiB against short lines costs a few hundred char comparisons per pair when
    /// they embed in it (issue 14: a graph with such a line took 104 s), and stays exact.
    #[test]
    fn a_mebibyte_line_against_short_ones_is_fast() {
        let long: Vec<char> = "the quick brown fox jumps over the lazy dog; "
            .chars()
            .cycle()
            .take(1 << 20)
            .collect();
        let p = Pattern::new(&long);
        let start = std::time::Instant::now();
        for w in ["fox", "lazy dog", "zebra quick", "jumped"] {
            let w: Vec<char> = w.chars().collect();
            for _ in 0..1000 {
                assert_eq!(p.distance(&w), long.len() - w.len(), "{w:?}");
                assert_eq!(distance(&w, &long), long.len() - w.len());
            }
        }
        // 8000 comparisons; the DP would scan 2^20 chars for each.
        assert!(start.elapsed().as_secs_f64() < 2.0, "{:?}", start.elapsed());
        let absent: Vec<char> = "XYZ".chars().collect();
        assert_eq!(distance(&absent, &long[..500]), 500);
        assert_eq!(plain(&absent, &long[..500]), 500);
    }

    /// Equal strings are answered without a scan; a one-character change still is scanned.
    #[test]
    fn equal_texts_short_circuit() {
        let long: Vec<char> = "ab€d".chars().cycle().take(1 << 16).collect();
        let p = Pattern::new(&long);
        assert_eq!(p.distance(&long), 0);
        assert_eq!(p.bounded(&long, 0), Some(0));
        let mut other = long.clone();
        other[40_000] = 'z';
        assert_eq!(p.bounded(&other, 3), Some(1));
        assert_eq!(p.bounded(&other, 0), None);
    }
}
