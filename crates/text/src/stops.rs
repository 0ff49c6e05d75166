//! Stop strings found in streamed text in time proportional to the new text, whatever the
//! stop strings: an Aho–Corasick automaton over their bytes, fed piece by piece.
//!
//! Each state is a prefix of some stop string, and after any text the state is the longest
//! suffix of that text that is such a prefix; its depth is therefore exactly how many bytes
//! at the end of the text may still begin a stop string (what a stream holds back). The
//! `aho-corasick` crate's automata keep their states opaque and cannot say this depth, hence
//! this small automaton of our own.
//!
//! ```text
//! stops ["</s>", "User:"]      feed("Hi </")  -> no stop, partial() = 2 ("</" held)
//!                              feed("s> more") -> stop 0 ending at byte 2 of this piece
//! ```

use std::collections::VecDeque;

/// A node: the prefix it stands for is `depth` bytes long.
#[derive(Debug, Clone)]
struct Node {
    /// Children by byte, sorted.
    next: Vec<(u8, u32)>,
    /// The longest proper suffix of this prefix that is also a prefix.
    fail: u32,
    depth: u32,
    /// The longest stop string that ends at this node or at one of its failure ancestors.
    ends: Option<u32>,
}

/// The automaton of a request's stop strings (built once, shared by its matcher).
#[derive(Debug, Clone)]
pub struct Stops {
    nodes: Vec<Node>,
    lens: Vec<usize>,
}

impl Stops {
    /// The automaton of `stops` (non-empty strings).
    pub fn new<S: AsRef<str>>(stops: &[S]) -> Stops {
        let mut nodes = vec![Node {
            next: Vec::new(),
            fail: 0,
            depth: 0,
            ends: None,
        }];
        for (i, s) in stops.iter().enumerate() {
            let mut at = 0usize;
            for &b in s.as_ref().as_bytes() {
                at = match nodes[at].next.binary_search_by_key(&b, |c| c.0) {
                    Ok(k) => nodes[at].next[k].1 as usize,
                    Err(k) => {
                        let id = nodes.len() as u32;
                        let depth = nodes[at].depth + 1;
                        nodes[at].next.insert(k, (b, id));
                        nodes.push(Node {
                            next: Vec::new(),
                            fail: 0,
                            depth,
                            ends: None,
                        });
                        id as usize
                    }
                };
            }
            if at != 0 && nodes[at].ends.is_none() {
                nodes[at].ends = Some(i as u32);
            }
        }
        let mut stops = Stops {
            lens: stops.iter().map(|s| s.as_ref().len()).collect(),
            nodes,
        };
        stops.link();
        stops
    }

    /// Failure links and inherited ends, breadth first (a node's failure is shallower).
    fn link(&mut self) {
        let mut queue: VecDeque<u32> = self.nodes[0].next.iter().map(|c| c.1).collect();
        while let Some(n) = queue.pop_front() {
            let children = self.nodes[n as usize].next.clone();
            for (b, child) in children {
                let mut f = self.nodes[n as usize].fail;
                let fail = loop {
                    if let Some(t) = self.child(f, b).filter(|&t| t != child) {
                        break t;
                    }
                    if f == 0 {
                        break 0;
                    }
                    f = self.nodes[f as usize].fail;
                };
                let inherited = self.nodes[fail as usize].ends;
                let node = &mut self.nodes[child as usize];
                node.fail = fail;
                node.ends = node.ends.or(inherited);
                queue.push_back(child);
            }
        }
    }

    fn child(&self, n: u32, b: u8) -> Option<u32> {
        let next = &self.nodes[n as usize].next;
        next.binary_search_by_key(&b, |c| c.0)
            .ok()
            .map(|k| next[k].1)
    }

    /// The state after `b` from state `n`, and the failure links followed on the way.
    fn step(&self, mut n: u32, b: u8) -> (u32, usize) {
        let mut links = 0;
        loop {
            if let Some(t) = self.child(n, b) {
                return (t, links);
            }
            if n == 0 {
                return (0, links);
            }
            n = self.nodes[n as usize].fail;
            links += 1;
        }
    }
}

/// Where a stop string was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopFound {
    /// Which stop string (its index in the list).
    pub index: usize,
    /// The byte offset in the piece just fed where it ends.
    pub end: usize,
    /// Its length in bytes (it may start in earlier pieces).
    pub len: usize,
}

/// One stream's place in a [`Stops`] automaton.
#[derive(Debug, Clone)]
pub struct StopMatcher {
    stops: Stops,
    state: u32,
    /// Transitions and failure links taken so far: at most twice the bytes fed (each byte
    /// deepens the state by at most one, each failure link makes it shallower).
    work: usize,
}

impl StopMatcher {
    pub fn new(stops: Stops) -> StopMatcher {
        StopMatcher {
            stops,
            state: 0,
            work: 0,
        }
    }

    /// Feeds the next `piece` of the text: the first stop string that ends in it (the
    /// longest of those ending at the same byte), or `None`.
    pub fn feed(&mut self, piece: &str) -> Option<StopFound> {
        for (i, &b) in piece.as_bytes().iter().enumerate() {
            let (next, links) = self.stops.step(self.state, b);
            self.work += 1 + links;
            self.state = next;
            if let Some(index) = self.stops.nodes[next as usize].ends {
                let index = index as usize;
                return Some(StopFound {
                    index,
                    end: i + 1,
                    len: self.stops.lens[index],
                });
            }
        }
        None
    }

    /// Bytes at the end of the text fed so far that may still begin a stop string.
    pub fn partial(&self) -> usize {
        self.stops.nodes[self.state as usize].depth as usize
    }

    /// Transitions and failure links taken so far (the matching's cost).
    pub fn work(&self) -> usize {
        self.work
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first stop (longest at equal ends) by brute force over the whole text, and the
    /// longest suffix that is a proper prefix of a stop.
    fn naive(stops: &[&str], text: &str) -> (Option<(usize, usize)>, usize) {
        let b = text.as_bytes();
        let found = (1..=b.len()).find_map(|end| {
            stops
                .iter()
                .enumerate()
                .filter(|(_, s)| b[..end].ends_with(s.as_bytes()))
                .max_by_key(|(i, s)| (s.len(), std::cmp::Reverse(*i)))
                .map(|(i, _)| (i, end))
        });
        let partial = (0..=b.len())
            .find(|&at| stops.iter().any(|s| s.as_bytes().starts_with(&b[at..])))
            .map_or(0, |at| b.len() - at);
        (found, partial)
    }

    #[test]
    fn the_module_example() {
        let mut m = StopMatcher::new(Stops::new(&["</s>", "User:"]));
        assert_eq!(m.feed("Hi </"), None);
        assert_eq!(m.partial(), 2);
        let f = m.feed("s> more").unwrap();
        assert_eq!((f.index, f.end, f.len), (0, 2, 4));
    }

    #[test]
    fn agrees_with_brute_force_piece_by_piece() {
        let mut seed = 1u64;
        let mut rand = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let alphabet = ["a", "b", "ab", "é", "\n"];
        for _ in 0..2000 {
            let stops: Vec<String> = (0..1 + rand(4))
                .map(|_| (0..1 + rand(4)).map(|_| alphabet[rand(5)]).collect())
                .collect();
            let stops: Vec<&str> = stops.iter().map(String::as_str).collect();
            let mut m = StopMatcher::new(Stops::new(&stops));
            let mut text = String::new();
            for _ in 0..12 {
                let piece: String = (0..rand(3)).map(|_| alphabet[rand(5)]).collect();
                let before = text.len();
                text.push_str(&piece);
                let (want, partial) = naive(&stops, &text);
                match m.feed(&piece) {
                    Some(f) => {
                        assert_eq!(Some((f.index, before + f.end)), want, "{stops:?} {text:?}");
                        assert_eq!(f.len, stops[f.index].len());
                        break;
                    }
                    None => {
                        assert!(want.is_none(), "{stops:?} {text:?}: missed {want:?}");
                        assert_eq!(m.partial(), partial, "{stops:?} {text:?}");
                    }
                }
            }
        }
    }

    /// Matching costs at most two steps a byte fed, however long the stop strings: a text
    /// that keeps almost matching 16 stop strings of 100,000 bytes costs what it costs
    /// against 16 of 10 bytes.
    #[test]
    fn work_is_linear_in_the_text_whatever_the_needles() {
        for len in [10, 100_000] {
            let stops: Vec<String> = (0..16)
                .map(|i| format!("{}{}", "a".repeat(len - 1), char::from(b'b' + i as u8)))
                .collect();
            let mut m = StopMatcher::new(Stops::new(&stops));
            let text = "a".repeat(50) + "x" + &"a".repeat(5000);
            let mut fed = 0;
            for piece in text.as_bytes().chunks(3) {
                let piece = std::str::from_utf8(piece).unwrap();
                assert_eq!(m.feed(piece), None);
                fed += piece.len();
                assert!(
                    m.work() <= 2 * fed,
                    "{len}: {} steps for {fed} bytes",
                    m.work()
                );
            }
            assert_eq!(m.partial(), 5000.min(len - 1));
        }
    }
}
