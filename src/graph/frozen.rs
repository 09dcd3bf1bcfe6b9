//! A compact, read-only adjacency (CSR) of the graph for fast walks: each node's out-edges and
//! in-edges lie next to each other in one array, where petgraph's linked edge lists scatter them.
//! Built from the petgraph graph when it has been quiet for a while; dropped on any change.

use petgraph::Direction as PetDirection;
use petgraph::stable_graph::{EdgeIndex, StableDiGraph};
use petgraph::visit::EdgeRef;

use crate::graph::{EdgeData, Key};

/// One neighbour: the node, the petgraph edge (for its data) and its strength (read inline, so
/// an unfiltered walk never touches the edge data).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Adj {
    pub(crate) nbr: u32,
    pub(crate) edge: u32,
    pub(crate) weight: f32,
}

/// Per node `i`: out-edges at `adj[off[2i]..off[2i+1]]`, in-edges at `adj[off[2i+1]..off[2i+2]]`.
#[derive(Debug, Default)]
pub(crate) struct Frozen {
    off: Vec<u32>,
    adj: Vec<Adj>,
}

impl Frozen {
    pub(crate) fn build(g: &StableDiGraph<Key, EdgeData, u32>, node_bound: usize) -> Frozen {
        let mut off = vec![0u32; 2 * node_bound + 1];
        let mut adj = Vec::with_capacity(2 * g.edge_count());
        let mut next = 0;
        for n in g.node_indices() {
            let i = n.index();
            // Holes in the index space (removed nodes) get empty ranges.
            for slot in &mut off[next..=2 * i] {
                *slot = adj.len() as u32;
            }
            adj.extend(g.edges_directed(n, PetDirection::Outgoing).map(|e| Adj {
                nbr: e.target().index() as u32,
                edge: e.id().index() as u32,
                weight: e.weight().strength,
            }));
            off[2 * i + 1] = adj.len() as u32;
            adj.extend(g.edges_directed(n, PetDirection::Incoming).map(|e| Adj {
                nbr: e.source().index() as u32,
                edge: e.id().index() as u32,
                weight: e.weight().strength,
            }));
            next = 2 * i + 2;
        }
        for slot in &mut off[next..] {
            *slot = adj.len() as u32;
        }
        Frozen { off, adj }
    }

    /// (out-edges, in-edges) of node `i`.
    #[inline]
    pub(crate) fn of(&self, i: usize) -> (&[Adj], &[Adj]) {
        let (a, b, c) = (
            self.off[2 * i] as usize,
            self.off[2 * i + 1] as usize,
            self.off[2 * i + 2] as usize,
        );
        (&self.adj[a..b], &self.adj[b..c])
    }

    /// Hints the CPU to fetch node `i`'s offsets (`far`) or its edges (`near`, which reads the
    /// offsets): walks know their next nodes well ahead, and a random graph is memory-bound.
    #[inline]
    pub(crate) fn prefetch(&self, i: usize, near: bool) {
        if near {
            if let Some(&a) = self.off.get(2 * i) {
                prefetch(self.adj.as_ptr().wrapping_add(a as usize));
            }
        } else {
            prefetch(self.off.as_ptr().wrapping_add(2 * i));
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        self.off.capacity() * 4 + self.adj.capacity() * std::mem::size_of::<Adj>()
    }
}

/// The edge of an [`Adj`].
pub(crate) fn edge_index(a: Adj) -> EdgeIndex<u32> {
    EdgeIndex::new(a.edge as usize)
}

#[inline]
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint; it never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
