//! Who reads a prompt next: the request that has had the least prompt reading so far.
//!
//! One request can carry many prompts (an array of prompts, `n` choices), and a prompt can be
//! tens of thousands of tokens; read in arrival order, a request of 40 long prompts kept every
//! request behind it from its first token for minutes. So prompt slices go first to the
//! request that has been read least (least attained service): a short request that arrives
//! while a long one is being read is read in the next step, and two long ones take turns.
//! The sequences of one request keep their own order among themselves.
//!
//! A request is a group of sequences named by its first sequence's id; a sequence that is
//! alone is its own group. What counts is prompt tokens scheduled for the group's sequences;
//! a group is forgotten when its last sequence leaves.

use std::collections::HashMap;

use crate::sequence::SeqId;

#[derive(Debug, Clone, Default)]
pub struct PromptShares {
    groups: HashMap<SeqId, Share>,
    group_of: HashMap<SeqId, SeqId>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Share {
    live: usize,
    read: usize,
}

impl PromptShares {
    /// A new sequence, in a group of its own.
    pub fn add(&mut self, id: SeqId) {
        self.group_of.insert(id, id);
        self.groups.entry(id).or_default().live += 1;
    }

    /// Moves `id` (with nothing read yet) into `group`, another sequence's group.
    pub fn join(&mut self, id: SeqId, group: SeqId) {
        let Some(&target) = self.group_of.get(&group) else {
            return;
        };
        if self.group_of.get(&id) == Some(&target) {
            return;
        }
        self.leave(id);
        self.group_of.insert(id, target);
        self.groups.entry(target).or_default().live += 1;
    }

    /// `id` is gone (finished or cancelled).
    pub fn leave(&mut self, id: SeqId) {
        let Some(group) = self.group_of.remove(&id) else {
            return;
        };
        if let Some(share) = self.groups.get_mut(&group) {
            share.live -= 1;
            if share.live == 0 {
                self.groups.remove(&group);
            }
        }
    }

    /// `tokens` of `id`'s prompt were scheduled.
    pub fn read(&mut self, id: SeqId, tokens: usize) {
        if let Some(share) = self.group_of.get(&id).and_then(|g| self.groups.get_mut(g)) {
            share.read += tokens;
        }
    }

    /// Prompt tokens read so far for `id`'s request: lower goes first.
    pub fn served(&self, id: SeqId) -> usize {
        self.group_of
            .get(&id)
            .and_then(|g| self.groups.get(g))
            .map_or(0, |s| s.read)
    }

    /// Groups known (for the invariants: one per request with a live sequence).
    pub fn num_groups(&self) -> usize {
        self.groups.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_served_as_one_and_forgotten_when_it_ends() {
        let mut s = PromptShares::default();
        for id in 1..=3 {
            s.add(id);
        }
        s.join(2, 1);
        s.join(3, 2); // 2's group is 1's
        s.read(2, 100);
        s.read(3, 50);
        assert_eq!((s.served(1), s.served(2), s.served(3)), (150, 150, 150));
        s.add(4);
        assert_eq!(s.served(4), 0);
        for id in 1..=3 {
            s.leave(id);
        }
        assert_eq!(s.num_groups(), 1);
        assert_eq!(s.served(1), 0);
    }
}
