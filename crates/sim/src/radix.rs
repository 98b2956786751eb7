//! A radix tree of cached token prefixes, like SGLang's `RadixCache`.
//!
//! Nodes live in an arena; each edge holds a run of token ids. A request locks the node its
//! matched prefix ends at (and so every ancestor) while it runs, so that prefix cannot be
//! evicted under it. Eviction removes least-recently-used unlocked leaves.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Index of a node in the tree; [`RadixCache::ROOT`] is the empty prefix.
pub(crate) type NodeId = usize;

#[derive(Debug, Default)]
struct Node {
    key: Vec<u32>,
    children: HashMap<u32, NodeId>,
    parent: NodeId,
    lock_ref: u32,
    last_access: u64,
}

/// The tree plus token accounting.
#[derive(Debug)]
pub(crate) struct RadixCache {
    nodes: Vec<Option<Node>>,
    free: Vec<NodeId>,
    total_tokens: u64,
    locked_tokens: u64,
    clock: u64,
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

    fn alloc(&mut self, node: Node) -> NodeId {
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
        (matched, node)
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
        });
        self.node_mut(node).children.insert(first, leaf);
        self.total_tokens += n;
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
            }
            id = parent;
        }
    }

    /// Evicts least-recently-used unlocked leaves until at least `want` tokens are freed or
    /// nothing evictable is left; returns the tokens freed.
    pub(crate) fn evict(&mut self, want: u64) -> u64 {
        let mut heap: BinaryHeap<Reverse<(u64, NodeId)>> = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(id, n)| n.as_ref().map(|n| (id, n)))
            .filter(|(id, n)| *id != Self::ROOT && n.children.is_empty() && n.lock_ref == 0)
            .map(|(id, n)| Reverse((n.last_access, id)))
            .collect();
        let mut freed = 0;
        while freed < want {
            let Some(Reverse((_, id))) = heap.pop() else {
                break;
            };
            let node = self.nodes[id].take().expect("live leaf");
            self.free.push(id);
            freed += node.key.len() as u64;
            let parent = node.parent;
            let p = self.node_mut(parent);
            p.children.remove(&node.key[0]);
            if parent != Self::ROOT && p.children.is_empty() && p.lock_ref == 0 {
                heap.push(Reverse((p.last_access, parent)));
            }
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
}
