use std::fmt;
use std::str::FromStr;

/// A set of logical CPU (or NUMA node) numbers, parsed from and printed as the kernel's list
/// format: `0-3,8-11`.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CpuSet {
    words: Vec<u64>,
}

/// A CPU list that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CPU list {input:?}: {reason} (expected a list like 0-3,8-11)")]
pub struct CpuSetError {
    /// The text that was given.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The highest CPU number accepted by the parser (the kernel's NR_CPUS is at most 8192).
const MAX_CPU: u32 = 1 << 16;

impl CpuSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses the kernel's list format (`0-3,8-11`; whitespace and an empty list are accepted).
    pub fn parse(input: &str) -> Result<Self, CpuSetError> {
        let err = |reason: String| CpuSetError {
            input: input.to_string(),
            reason,
        };
        let mut set = CpuSet::new();
        for part in input.trim().split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let num = |s: &str| -> Result<u32, CpuSetError> {
                let n: u32 = s
                    .trim()
                    .parse()
                    .map_err(|_| err(format!("{s:?} is not a CPU number")))?;
                if n > MAX_CPU {
                    return Err(err(format!(
                        "{n} is above the largest CPU number {MAX_CPU}"
                    )));
                }
                Ok(n)
            };
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (num(a)?, num(b)?);
                    if a > b {
                        return Err(err(format!("range {a}-{b} runs backwards")));
                    }
                    for c in a..=b {
                        set.insert(c);
                    }
                }
                None => set.insert(num(part)?),
            }
        }
        Ok(set)
    }

    /// Adds a CPU.
    pub fn insert(&mut self, cpu: u32) {
        let (w, b) = ((cpu / 64) as usize, cpu % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << b;
    }

    /// Removes a CPU.
    pub fn remove(&mut self, cpu: u32) {
        let (w, b) = ((cpu / 64) as usize, cpu % 64);
        if let Some(word) = self.words.get_mut(w) {
            *word &= !(1 << b);
        }
        self.trim();
    }

    /// True when `cpu` is in the set.
    pub fn contains(&self, cpu: u32) -> bool {
        let (w, b) = ((cpu / 64) as usize, cpu % 64);
        self.words.get(w).is_some_and(|word| word & (1 << b) != 0)
    }

    /// Number of CPUs in the set.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// True when the set has no CPU.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    /// The CPUs in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &word)| {
            (0..64u32)
                .filter(move |b| word & (1u64 << b) != 0)
                .map(move |b| i as u32 * 64 + b)
        })
    }

    /// The lowest CPU, if any.
    pub fn first(&self) -> Option<u32> {
        self.iter().next()
    }

    /// CPUs in both sets.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        let mut s = CpuSet {
            words: self
                .words
                .iter()
                .zip(&other.words)
                .map(|(a, b)| a & b)
                .collect(),
        };
        s.trim();
        s
    }

    /// CPUs in either set.
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        let n = self.words.len().max(other.words.len());
        let get = |v: &Vec<u64>, i: usize| v.get(i).copied().unwrap_or(0);
        CpuSet {
            words: (0..n)
                .map(|i| get(&self.words, i) | get(&other.words, i))
                .collect(),
        }
    }

    /// CPUs of `self` that are not in `other`.
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        let mut s = CpuSet {
            words: self
                .words
                .iter()
                .enumerate()
                .map(|(i, a)| a & !other.words.get(i).copied().unwrap_or(0))
                .collect(),
        };
        s.trim();
        s
    }

    /// True when every CPU of `self` is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.difference(other).is_empty()
    }

    fn trim(&mut self) {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        let mut s = CpuSet::new();
        for c in iter {
            s.insert(c);
        }
        s
    }
}

impl FromStr for CpuSet {
    type Err = CpuSetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CpuSet::parse(s)
    }
}

impl fmt::Display for CpuSet {
    /// The kernel's list format, ranges collapsed: `0-3,8-11`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut iter = self.iter().peekable();
        while let Some(start) = iter.next() {
            let mut end = start;
            while iter.peek() == Some(&(end + 1)) {
                end += 1;
                iter.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if end == start {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

impl serde::Serialize for CpuSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for CpuSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        CpuSet::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_format_round_trip() {
        for s in [
            "",
            "0",
            "0-3",
            "0-3,8-11",
            "1,3,5",
            "0-15,32-47",
            "63-64,127",
        ] {
            let set = CpuSet::parse(s).unwrap();
            assert_eq!(set.to_string(), s, "round trip of {s:?}");
        }
        let set = CpuSet::parse(" 0,1,2 , 3,7\n").unwrap();
        assert_eq!(set.to_string(), "0-3,7");
        assert_eq!(set.len(), 5);
    }

    #[test]
    fn set_operations() {
        let a = CpuSet::parse("0-7").unwrap();
        let b = CpuSet::parse("4-11").unwrap();
        assert_eq!(a.intersection(&b).to_string(), "4-7");
        assert_eq!(a.union(&b).to_string(), "0-11");
        assert_eq!(a.difference(&b).to_string(), "0-3");
        assert!(CpuSet::parse("5-6").unwrap().is_subset(&a));
        assert!(!b.is_subset(&a));
        assert_eq!(b.first(), Some(4));
        let mut c = CpuSet::parse("100").unwrap();
        c.remove(100);
        assert!(c.is_empty());
        assert_eq!(c, CpuSet::new());
    }

    #[test]
    fn bad_lists_are_rejected_with_the_input() {
        for s in ["a", "3-1", "1-", "-1", "0-99999999"] {
            let e = CpuSet::parse(s).unwrap_err();
            assert_eq!(e.input, s);
            assert!(e.to_string().contains("invalid CPU list"), "{e}");
        }
    }
}
