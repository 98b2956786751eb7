//! A radix tree of cached token prefixes, like SGLang's `RadixCache`.
//!
//! Nodes live in an arena; each edge holds a run of token ids. A request locks the node its
//! matched prefix ends at (and so every ancestor) while it runs, so that prefix cannot be
//! evicted under it. Eviction removes least-recently-used unlocked leaves.
//!
//! The leaves that may be evicted are kept in a heap as they change (a leaf made or touched, a
//! node left without children, a lock released), so an eviction costs the leaves it takes and
//! not a walk of the whole tree: with every admission at a full pool evicting a little, a walk
//! per eviction made a 100,000-request trace replay fall behind its schedule.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Index of a node in the tree; [`RadixCache::ROOT`] is the empty prefix.
pub(crate) type NodeId = usize;

#[derive(Debug, Default, Clone)]
struct Node {
    key: Vec<u32>,
    children: HashMap<u32, NodeId>,
    parent: NodeId,
    lock_ref: u32,
    last_access: u64,
    /// Which node holds this arena slot now (slots are reused): a heap entry of an earlier
    /// holder is stale.
    generation: u64,
}

/// An eviction candidate: a node's last access, its id and the generation it was seen at.
type Candidate = Reverse<(u64, NodeId, u64)>;

/// The tree plus token accounting.
#[derive(Debug, Clone)]
pub(crate) struct RadixCache {
    nodes: Vec<Option<Node>>,
    free: Vec<NodeId>,
    total_tokens: u64,
    locked_tokens: u64,
    clock: u64,
    /// Evictable leaves, least recently used first; entries made stale by a later access, a
    /// child, a lock or the node's end are skipped when they come up.
    candidates: BinaryHeap<Candidate>,
    generations: u64,
}

impl Default for RadixCache {
    fn default() -> Self {
        Self::new()
    }
}

impl RadixCache {
    /// The root node: the empty prefix, always present, never evicted.
    pub(crate) const ROOT: NodeId = 0;

    /// An empty tree.
    pub(crate) fn new() -> Self {
        RadixCache {
            nodes: vec![Some(Node::default())],
            free: Vec::new(),
            total_tokens: 0,
            locked_tokens: 0,
            clock: 0,
            candidates: BinaryHeap::new(),
            generations: 0,
        }
    }

    /// Tokens held in the tree.
    pub(crate) fn total_tokens(&self) -> u64 {
        self.total_tokens
    }

    /// Tokens in the tree that a running request protects from eviction.
    pub(crate) fn locked_tokens(&self) -> u64 {
        self.locked_tokens
    }

    /// Tokens that eviction could free now.
    pub(crate) fn evictable_tokens(&self) -> u64 {
        self.total_tokens - self.locked_tokens
    }

    /// Drops every cached prefix (callers ensure nothing is locked).
    pub(crate) fn reset(&mut self) {
        *self = Self::new();
    }

    fn node(&self, id: NodeId) -> &Node {
        self.nodes[id].as_ref().expect("live node")
    }

    fn node_mut(&mut self, id: NodeId) -> &mut Node {
        self.nodes[id].as_mut().expect("live node")
    }

    fn alloc(&mut self, mut node: Node) -> NodeId {
        self.generations += 1;
        node.generation = self.generations;
        match self.free.pop() {
            Some(id) => {
                self.nodes[id] = Some(node);
                id
            }
            None => {
                self.nodes.push(Some(node));
                self.nodes.len() - 1
            }
        }
    }

    /// Longest cached prefix of `tokens`: its length and the node it ends at. A match ending
    /// inside an edge splits that edge, so the returned node covers exactly the match.
    pub(crate) fn match_prefix(&mut self, tokens: &[u32]) -> (usize, NodeId) {
        self.clock += 1;
        let now = self.clock;
        let mut node = Self::ROOT;
        let mut matched = 0;
        self.node_mut(node).last_access = now;
        while matched < tokens.len() {
            let Some(&child) = self.node(node).children.get(&tokens[matched]) else {
                break;
            };
            let common = common_len(&self.node(child).key, &tokens[matched..]);
            let child = if common < self.node(child).key.len() {
                self.split(child, common)
            } else {
                child
            };
            self.node_mut(child).last_access = now;
            matched += common;
            node = child;
        }
        self.offer(node);
        (matched, node)
    }

    /// Puts `id` among the eviction candidates, as it is now, when it is an unlocked leaf.
    fn offer(&mut self, id: NodeId) {
        let n = self.node(id);
        if id != Self::ROOT && n.children.is_empty() && n.lock_ref == 0 {
            let entry = Reverse((n.last_access, id, n.generation));
            self.candidates.push(entry);
        }
        // Stale entries pile up as leaves are touched: rebuilt from the tree when they
        // outnumber the nodes, which keeps the heap's size and cost bounded.
        if self.candidates.len() > 2 * self.nodes.len() + 1024 {
            self.rebuild_candidates();
        }
    }

    fn rebuild_candidates(&mut self) {
        self.candidates = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(id, n)| n.as_ref().map(|n| (id, n)))
            .filter(|(id, n)| *id != Self::ROOT && n.children.is_empty() && n.lock_ref == 0)
            .map(|(id, n)| Reverse((n.last_access, id, n.generation)))
            .collect();
    }

    /// Whether a heap entry still names an evictable leaf as it was when offered.
    fn current(&self, (last_access, id, generation): (u64, NodeId, u64)) -> bool {
        self.nodes[id].as_ref().is_some_and(|n| {
            n.generation == generation
                && n.last_access == last_access
                && n.children.is_empty()
                && n.lock_ref == 0
        })
    }

    /// Splits `id`'s edge after `at` tokens; returns the new upper node.
    fn split(&mut self, id: NodeId, at: usize) -> NodeId {
        let (parent, lock_ref, last_access, head, tail_first) = {
            let n = self.node_mut(id);
            let tail = n.key.split_off(at);
            let head = std::mem::replace(&mut n.key, tail);
            (n.parent, n.lock_ref, n.last_access, head, n.key[0])
        };
        let first = head[0];
        let upper = self.alloc(Node {
            key: head,
            children: HashMap::from([(tail_first, id)]),
            parent,
            lock_ref,
            last_access,
            generation: 0,
        });
        self.node_mut(id).parent = upper;
        self.node_mut(parent).children.insert(first, upper);
        upper
    }

    /// Inserts `tokens`; returns how many tokens were new to the tree.
    pub(crate) fn insert(&mut self, tokens: &[u32]) -> u64 {
        let (matched, node) = self.match_prefix(tokens);
        if matched == tokens.len() {
            return 0;
        }
        let rest = tokens[matched..].to_vec();
        let n = rest.len() as u64;
        let first = rest[0];
        let now = self.clock;
        let leaf = self.alloc(Node {
            key: rest,
            children: HashMap::new(),
            parent: node,
            lock_ref: 0,
            last_access: now,
            generation: 0,
        });
        self.node_mut(node).children.insert(first, leaf);
        self.total_tokens += n;
        self.offer(leaf);
        n
    }

    /// Protects the path from the root to `id` from eviction.
    pub(crate) fn lock(&mut self, mut id: NodeId) {
        while id != Self::ROOT {
            let n = self.node_mut(id);
            n.lock_ref += 1;
            let (len, parent, newly) = (n.key.len() as u64, n.parent, n.lock_ref == 1);
            if newly {
                self.locked_tokens += len;
            }
            id = parent;
        }
    }

    /// Undoes one [`lock`](Self::lock) of `id`.
    pub(crate) fn unlock(&mut self, mut id: NodeId) {
        while id != Self::ROOT {
            let n = self.node_mut(id);
            n.lock_ref = n.lock_ref.saturating_sub(1);
            let (len, parent, freed) = (n.key.len() as u64, n.parent, n.lock_ref == 0);
            if freed {
                self.locked_tokens -= len;
                self.offer(id);
            }
            id = parent;
        }
    }

    /// Evicts least-recently-used unlocked leaves until at least `want` tokens are freed or
    /// nothing evictable is left; returns the tokens freed.
    pub(crate) fn evict(&mut self, want: u64) -> u64 {
        let mut freed = 0;
        while freed < want {
            let Some(Reverse(entry)) = self.candidates.pop() else {
                break;
            };
            if !self.current(entry) {
                continue;
            }
            let id = entry.1;
            let node = self.nodes[id].take().expect("live leaf");
            self.free.push(id);
            freed += node.key.len() as u64;
            let parent = node.parent;
            self.node_mut(parent).children.remove(&node.key[0]);
            self.offer(parent);
        }
        self.total_tokens -= freed;
        freed
    }
}

fn common_len(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(r: std::ops::Range<u32>) -> Vec<u32> {
        r.collect()
    }

    #[test]
    fn insert_then_match_whole_and_prefix() {
        let mut t = RadixCache::new();
        assert_eq!(t.insert(&seq(0..10)), 10);
        assert_eq!(t.match_prefix(&seq(0..10)).0, 10);
        assert_eq!(t.match_prefix(&seq(0..4)).0, 4);
        assert_eq!(t.match_prefix(&[0, 1, 99]).0, 2);
        assert_eq!(t.match_prefix(&[5]).0, 0);
        assert_eq!(t.total_tokens(), 10);
    }

    #[test]
    fn insert_counts_only_new_tokens_and_splits() {
        let mut t = RadixCache::new();
        t.insert(&seq(0..10));
        let mut b = seq(0..5);
        b.extend([100, 101, 102]);
        assert_eq!(t.insert(&b), 3);
        assert_eq!(t.total_tokens(), 13);
        assert_eq!(t.match_prefix(&b).0, 8);
        assert_eq!(t.match_prefix(&seq(0..10)).0, 10);
        assert_eq!(t.insert(&seq(0..10)), 0);
    }

    #[test]
    fn evicts_least_recently_used_leaf_first() {
        let mut t = RadixCache::new();
        t.insert(&[1, 2, 3]);
        t.insert(&[4, 5, 6]);
        t.match_prefix(&[1, 2, 3]); // touch: [4,5,6] is now older
        assert_eq!(t.evict(1), 3);
        assert_eq!(t.match_prefix(&[4, 5, 6]).0, 0);
        assert_eq!(t.match_prefix(&[1, 2, 3]).0, 3);
        assert_eq!(t.total_tokens(), 3);
    }

    #[test]
    fn locked_prefix_survives_eviction() {
        let mut t = RadixCache::new();
        t.insert(&[1, 2, 3, 4]);
        t.insert(&[1, 2, 9]);
        let (n, node) = t.match_prefix(&[1, 2, 3, 4]);
        assert_eq!(n, 4);
        t.lock(node);
        assert_eq!(t.locked_tokens(), 4);
        assert_eq!(t.evictable_tokens(), 1);
        assert_eq!(t.evict(100), 1);
        assert_eq!(t.match_prefix(&[1, 2, 3, 4]).0, 4);
        t.unlock(node);
        assert_eq!(t.locked_tokens(), 0);
        assert_eq!(t.evict(100), 4);
        assert_eq!(t.total_tokens(), 0);
    }

    #[test]
    fn eviction_cascades_to_parents_that_become_leaves() {
        let mut t = RadixCache::new();
        t.insert(&[1, 2, 3]);
        t.insert(&[1, 2, 4]);
        assert_eq!(t.total_tokens(), 4);
        assert_eq!(t.evict(4), 4);
        assert_eq!(t.match_prefix(&[1, 2]).0, 0);
    }

    #[test]
    fn split_inside_locked_path_keeps_lock_counts() {
        let mut t = RadixCache::new();
        t.insert(&[1, 2, 3, 4]);
        let (_, node) = t.match_prefix(&[1, 2, 3, 4]);
        t.lock(node);
        t.match_prefix(&[1, 2]); // splits the locked edge
        t.unlock(node);
        assert_eq!(t.locked_tokens(), 0);
        assert_eq!(t.evict(10), 4);
    }

    #[test]
    fn capacity_accounting_with_arena_reuse() {
        let mut t = RadixCache::new();
        for round in 0..50u32 {
            t.insert(&[round, round + 1, round + 2]);
            if t.total_tokens() > 30 {
                t.evict(t.total_tokens() - 30);
            }
            assert!(t.total_tokens() <= 30);
        }
        assert!(t.nodes.len() < 40, "arena slots are reused");
        t.reset();
        assert_eq!(t.total_tokens(), 0);
    }

    /// The eviction of old: every evictable leaf found by a walk of the whole tree.
    fn evict_by_walk(t: &mut RadixCache, want: u64) -> u64 {
        let mut heap: BinaryHeap<Reverse<(u64, NodeId)>> = t
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(id, n)| n.as_ref().map(|n| (id, n)))
            .filter(|(id, n)| *id != RadixCache::ROOT && n.children.is_empty() && n.lock_ref == 0)
            .map(|(id, n)| Reverse((n.last_access, id)))
            .collect();
        let mut freed = 0;
        while freed < want {
            let Some(Reverse((_, id))) = heap.pop() else {
                break;
            };
            let node = t.nodes[id].take().expect("live leaf");
            t.free.push(id);
            freed += node.key.len() as u64;
            let parent = node.parent;
            let p = t.node_mut(parent);
            p.children.remove(&node.key[0]);
            if parent != RadixCache::ROOT && p.children.is_empty() && p.lock_ref == 0 {
                heap.push(Reverse((p.last_access, parent)));
            }
        }
        t.total_tokens -= freed;
        freed
    }

    /// The tree's prefixes, as a set of (path of keys) for comparing two trees.
    fn prefixes(t: &RadixCache) -> std::collections::BTreeSet<Vec<u32>> {
        let mut out = std::collections::BTreeSet::new();
        let mut stack = vec![(RadixCache::ROOT, Vec::new())];
        while let Some((id, path)) = stack.pop() {
            for &child in t.node(id).children.values() {
                let mut p = path.clone();
                p.extend_from_slice(&t.node(child).key);
                out.insert(p.clone());
                stack.push((child, p));
            }
        }
        out
    }

    /// The kept candidates evict exactly what a walk of the whole tree would, through random
    /// inserts, matches, locks and evictions (arena slots reused, stale entries skipped).
    #[test]
    fn kept_candidates_evict_what_a_walk_would() {
        let mut t = RadixCache::new();
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let mut locked: Vec<NodeId> = Vec::new();
        for step in 0..3000 {
            let conv = next(6) as u32;
            let len = 1 + next(5) as usize;
            let tokens: Vec<u32> = (0..len)
                .map(|i| {
                    if i < 2 {
                        conv * 100 + i as u32
                    } else {
                        next(4) as u32
                    }
                })
                .collect();
            match next(5) {
                0 | 1 => {
                    t.insert(&tokens);
                }
                2 => {
                    let (_, node) = t.match_prefix(&tokens);
                    if node != RadixCache::ROOT && locked.len() < 4 {
                        t.lock(node);
                        locked.push(node);
                    }
                }
                3 if !locked.is_empty() => {
                    let node = locked.remove(next(locked.len() as u64) as usize);
                    t.unlock(node);
                }
                _ => {
                    let want = 1 + next(6);
                    let mut reference = t.clone();
                    let expected = evict_by_walk(&mut reference, want);
                    assert_eq!(t.evict(want), expected, "step {step}");
                    assert_eq!(prefixes(&t), prefixes(&reference), "step {step}");
                    assert_eq!(t.total_tokens(), reference.total_tokens());
                }
            }
        }
    }
}
