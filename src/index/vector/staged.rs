//! The slots waiting for the graph, oldest first, each with the sketch of its direction from the
//! index's centre (see [`super::sketch`]). Searches read them beside the graph: all of them
//! exactly while they are few, and beyond [`EXACT_UP_TO`] a shortlist picked by sketch, so a
//! million vectors staged by an import cost a search a few milliseconds instead of a scan of
//! every vector.

use super::sketch::{Sketcher, nearest};

/// Staged slots a search scores exactly, all of them; beyond, it scores a shortlist.
pub(super) const EXACT_UP_TO: usize = 16_384;
/// Smallest shortlist scored exactly out of many staged slots (lengthened when a scope keeps
/// only a share of them). On a million real memory embeddings, the 4,096 nearest sketches held
/// 0.9x of a query's true ten nearest (`examples/vector_scale.rs --staged`).
pub(super) const SHORTLIST: usize = 4_096;

pub(super) struct Staged {
    slots: Vec<u32>,
    /// `words` per slot, in the order of `slots`.
    codes: Vec<u64>,
    /// Slots before this position have left (taken into the graph); dropped in bulk.
    head: usize,
    /// Whether each slot is staged, by slot.
    member: Vec<bool>,
    sketcher: Sketcher,
}

impl Staged {
    pub(super) fn new(dim: usize) -> Staged {
        Staged {
            slots: Vec::new(),
            codes: Vec::new(),
            head: 0,
            member: Vec::new(),
            sketcher: Sketcher::new(dim),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.slots.len() - self.head
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The staged slots, oldest first.
    pub(super) fn slots(&self) -> &[u32] {
        &self.slots[self.head..]
    }

    /// Whether `slot` is staged.
    pub(super) fn holds(&self, slot: u32) -> bool {
        self.member.get(slot as usize).copied().unwrap_or(false)
    }

    /// The sketch of a vector (a direction, or anything pointing the same way).
    pub(super) fn sketch(&self, v: &[f32]) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.sketcher.words());
        self.sketcher.sketch(v, &mut out);
        out
    }

    /// Stages `slot` with the sketch of its direction.
    pub(super) fn push(&mut self, slot: u32, sketch: &[u64]) {
        debug_assert_eq!(sketch.len(), self.sketcher.words());
        self.slots.push(slot);
        self.codes.extend_from_slice(sketch);
        let at = slot as usize;
        if self.member.len() <= at {
            self.member.resize(at + 1, false);
        }
        self.member[at] = true;
    }

    /// Unstages the `n` oldest slots.
    pub(super) fn take_front(&mut self, n: usize) {
        let n = n.min(self.len());
        for i in self.head..self.head + n {
            self.member[self.slots[i] as usize] = false;
        }
        self.head += n;
        // Dropped once they are half of what is held: each slot is moved at most once more.
        if self.head >= 1_024 && self.head * 2 >= self.slots.len() {
            let words = self.sketcher.words();
            self.slots.drain(..self.head);
            self.codes.drain(..self.head * words);
            self.head = 0;
        }
    }

    /// Renumbers the slots by `renamed` (indexed by old slot), dropping those renamed to
    /// `u32::MAX`; the order stays.
    pub(super) fn renumber(&mut self, renamed: &[u32]) {
        let words = self.sketcher.words();
        let mut slots = Vec::with_capacity(self.len());
        let mut codes = Vec::with_capacity(self.len() * words);
        let mut member = vec![false; renamed.len()];
        for (i, &slot) in self.slots().iter().enumerate() {
            let to = renamed[slot as usize];
            if to != u32::MAX {
                member[to as usize] = true;
                slots.push(to);
                let at = (self.head + i) * words;
                codes.extend_from_slice(&self.codes[at..at + words]);
            }
        }
        self.slots = slots;
        self.codes = codes;
        self.member = member;
        self.head = 0;
    }

    /// Sketches every staged slot anew from `direction` (after the centre moved).
    pub(super) fn resketch(&mut self, direction: impl Fn(u32) -> Vec<f32>) {
        let words = self.sketcher.words();
        let mut codes = Vec::with_capacity(self.len() * words);
        for &slot in self.slots() {
            self.sketcher.sketch(&direction(slot), &mut codes);
        }
        self.codes = codes;
        self.slots.drain(..self.head);
        self.head = 0;
    }

    /// The `n` staged slots whose sketches are nearest to `query`'s.
    pub(super) fn shortlist(&self, query: &[u64], n: usize) -> Vec<u32> {
        let words = self.sketcher.words();
        let slots = self.slots();
        nearest(query, &self.codes[self.head * words..], words, n)
            .into_iter()
            .map(|i| slots[i])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_leave_from_the_front_and_keep_their_sketches() {
        let mut s = Staged::new(64);
        for slot in 0..3_000u32 {
            s.push(slot, &[u64::from(slot)]);
        }
        s.take_front(1_000);
        assert_eq!((s.len(), s.slots()[0]), (2_000, 1_000));
        assert!(!s.holds(999) && s.holds(1_000) && !s.holds(3_000));
        s.take_front(600);
        // Past half: the front was dropped, what is left is unchanged.
        assert_eq!((s.head, s.len(), s.slots()[0]), (0, 1_400, 1_600));
        assert_eq!(s.shortlist(&[1_700], 1), [1_700]);
        // Renumbered: odd slots dropped, even ones halved.
        let renamed: Vec<u32> = (0..3_000u32)
            .map(|s| if s % 2 == 0 { s / 2 } else { u32::MAX })
            .collect();
        s.renumber(&renamed);
        assert_eq!((s.len(), s.slots()[0]), (700, 800));
        assert!(!s.holds(799) && s.holds(800) && s.holds(1_499) && !s.holds(1_500));
        assert_eq!(s.shortlist(&[1_700], 1), [850]);
        s.take_front(5_000);
        assert!(s.is_empty());
    }
}
