//! String sets for edit-distance search. Strings are kept as Unicode scalar values (`char`) in
//! one flat array with offsets, so distance kernels index characters, not bytes.

use crate::error::{Error, Result};

/// A list of strings, stored as chars in one flat array.
#[derive(Clone, Debug)]
pub struct StringSet {
    chars: Vec<char>,
    /// `offsets[i]..offsets[i + 1]` are the chars of string `i`; `offsets.len() == len + 1`.
    offsets: Vec<usize>,
}

impl Default for StringSet {
    /// An empty set, as [`StringSet::new`] (a derived default would lack the leading offset).
    fn default() -> Self {
        StringSet::new()
    }
}

impl StringSet {
    /// An empty set (its offsets hold the leading 0).
    pub fn new() -> Self {
        StringSet {
            chars: Vec::new(),
            offsets: vec![0],
        }
    }

    /// A set of `items`, in order. Errors with [`Error::InvalidInput`] when there are more than
    /// [`super::MAX_ITEMS`] of them.
    pub fn from_strings<I, S>(items: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut set = StringSet::new();
        for s in items {
            set.push(s.as_ref())?;
        }
        Ok(set)
    }

    /// Appends `s` as string `len()`. Errors with [`Error::InvalidInput`] when the set already
    /// holds [`super::MAX_ITEMS`] strings (indices must fit in `u32`).
    pub fn push(&mut self, s: &str) -> Result<()> {
        if self.len() >= super::MAX_ITEMS {
            return Err(Error::invalid("too many strings"));
        }
        self.chars.extend(s.chars());
        self.offsets.push(self.chars.len());
        Ok(())
    }

    /// Number of strings.
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Whether the set holds no string.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// String `i` as Unicode scalar values.
    pub fn get(&self, i: usize) -> &[char] {
        &self.chars[self.offsets[i]..self.offsets[i + 1]]
    }

    /// String `i` as an owned `String`.
    pub fn get_string(&self, i: usize) -> String {
        self.get(i).iter().collect()
    }

    /// Length in chars of the longest string.
    pub fn max_len(&self) -> usize {
        self.offsets
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or(0)
    }

    /// The strings in order, each as its Unicode scalar values.
    pub fn iter(&self) -> impl Iterator<Item = &[char]> + '_ {
        (0..self.len()).map(move |i| self.get(i))
    }

    /// Strings `rows` of this set, in that order (repeats allowed).
    pub fn gather(&self, rows: &[usize]) -> StringSet {
        let mut out = StringSet::new();
        for &r in rows {
            out.chars.extend_from_slice(self.get(r));
            out.offsets.push(out.chars.len());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::StringSet;

    #[test]
    fn the_default_set_is_empty_and_grows() {
        let mut set = StringSet::default();
        assert_eq!(set.len(), 0);
        assert!(set.is_empty());
        set.push("ab").unwrap();
        assert_eq!((set.len(), set.get(0)), (1, &['a', 'b'][..]));
    }
}
