//! Merged in-place updates: the `dynamic_update_slice`s and scatters that run in place
//! ([`super::in_place`]) and could run at the same point become one step, one kernel writing
//! each update into its own buffer. The case: `lax.scan` stacks every step's outputs and residuals into buffers of
//! `[T, ...]`, one `dynamic_update_slice` each per step (9 in a GRU's forward step), and
//! `fori_loop`s set rows of several arrays (`x.at[i].set(v)`, a scatter), each a launch of its
//! own that copies a few thousand elements; a launch costs tens of µs on
//! llvmpipe whatever its size. `WGPU_HLO_MERGE_UPDATES=0` turns it off.
//!
//! Loop kernels whose outputs only these updates read, as the values they write, run inside
//! the merged kernel, computed where each update reads them (a GRU's forward step: 3 more
//! launches).
//!
//! An update moves later, to the last update of its group, only past nodes that do not read
//! what it produces; the buffers it reads stay live until the merged step (the program's
//! liveness is computed after), so it reads what it would have read in its own place.

use std::collections::HashSet;

use super::{definitions, in_place, node_reads, switched_off, Node, Partition};
use crate::ir::{Function, Region, ValueId};

/// Most updates one merged step takes (each adds an output and an input binding, and a
/// branch to its kernel).
pub const MAX_UPDATES: usize = 16;

/// Merges in-place updates (see the module comment): returns `p` with each group of two or
/// more replaced by one [`Node::Updates`] at the place of its last member. `max_bindings`
/// bounds a merged kernel's buffers (inputs and outputs).
pub fn fuse(f: &Function, region: &Region, mut p: Partition, max_bindings: usize) -> Partition {
    if switched_off("WGPU_HLO_MERGE_UPDATES") {
        return p;
    }
    let def = definitions(region);
    // An empty update skips its launch (the runtime's rule for kernels with an empty input),
    // which a merged one cannot do for one part.
    let is_update = |node: &Node| match node {
        Node::Op(i) => region.ops.get(*i).is_some_and(|op| {
            let update = if in_place::in_place(f, op) {
                op.operands.get(1)
            } else if in_place::in_place_scatter(f, op) {
                op.operands.get(2)
            } else {
                None
            };
            update
                .and_then(|&u| f.ty(u).as_tensor())
                .is_some_and(|t| t.num_elements() > 0)
        }),
        _ => false,
    };
    // Groups of node indices, each to run at its last member's place.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    // What the open group's members produce, update and read.
    let mut produced: HashSet<ValueId> = HashSet::new();
    let mut targets: HashSet<ValueId> = HashSet::new();
    let mut inputs: HashSet<ValueId> = HashSet::new();
    let mut reads: HashSet<ValueId> = HashSet::new();
    for (k, node) in p.nodes.iter().enumerate() {
        let info = node_reads(region, &def, &p.materialized, node);
        let reads_open = info.reads.iter().any(|v| produced.contains(v));
        if is_update(node) {
            let Node::Op(i) = node else { continue };
            let op = &region.ops[*i];
            let target = op.operands.first().copied();
            // The buffers the merged kernel would bind: what the members read, except the
            // buffers they update (updated where they lie, each bound once, as the output
            // counted in `produced`), and their outputs.
            let mut with: HashSet<ValueId> = reads.union(&info.reads).copied().collect();
            for t in targets.iter().chain(target.iter()) {
                with.remove(t);
            }
            with.extend(op.results.iter().copied());
            let values: Vec<ValueId> = op.operands.iter().skip(1).copied().collect();
            // Each member updates a buffer of its own (two updates of one value are two
            // copies, which one step cannot both take), which no member reads otherwise (its
            // kernel may write the buffer while another part reads it).
            let fits = open.len() < MAX_UPDATES
                && with.len() + produced.len() < max_bindings
                && !reads_open
                && target.is_some_and(|t| !targets.contains(&t) && !inputs.contains(&t))
                && values
                    .iter()
                    .all(|v| !targets.contains(v) && Some(*v) != target);
            if !fits {
                groups.push(std::mem::take(&mut open));
                produced.clear();
                targets.clear();
                inputs.clear();
                reads.clear();
            }
            open.push(k);
            produced.extend(op.results.iter().copied());
            targets.extend(target);
            inputs.extend(values);
            reads.extend(info.reads);
        } else if reads_open {
            // This node needs an open update's result: the group runs before it.
            groups.push(std::mem::take(&mut open));
            produced.clear();
            targets.clear();
            inputs.clear();
            reads.clear();
        }
    }
    groups.push(open);
    // Every use of each value in the region: (op index, operand position); uses inside nested
    // regions count as `usize::MAX`.
    let mut uses: std::collections::HashMap<ValueId, Vec<(usize, usize)>> = Default::default();
    for (i, op) in region.ops.iter().enumerate() {
        for (k, v) in op.operands.iter().enumerate() {
            uses.entry(*v).or_default().push((i, k));
        }
        let mut captured = HashSet::new();
        for r in &op.regions {
            super::collect_captures(r, &mut captured);
        }
        for v in captured {
            uses.entry(v).or_default().push((i, usize::MAX));
        }
    }
    let mut remove = HashSet::new();
    let write_outputs = !switched_off("WGPU_HLO_UPDATE_OUTPUTS");
    // Kernels that run after a merged step instead of before it (see `can_defer`): node
    // index to the merged step's.
    let mut deferred: std::collections::HashMap<usize, usize> = Default::default();
    for g in groups.into_iter().filter(|g| !g.is_empty()) {
        let ops: Vec<usize> = g
            .iter()
            .filter_map(|&k| match p.nodes[k] {
                Node::Op(i) => Some(i),
                _ => None,
            })
            .collect();
        let Some((&last, earlier)) = g.split_last() else {
            continue;
        };
        // The update value's operand position of each member.
        let value_at: std::collections::HashMap<usize, usize> = ops
            .iter()
            .map(|&i| {
                (
                    i,
                    if in_place::in_place(f, &region.ops[i]) {
                        1
                    } else {
                        2
                    },
                )
            })
            .collect();
        // The buffers the members update: bound once each, as outputs.
        let targets: HashSet<ValueId> = ops
            .iter()
            .filter_map(|&i| region.ops[i].operands.first().copied())
            .collect();
        // The updates' common element count, if they have one.
        let sizes: HashSet<u64> = ops
            .iter()
            .filter_map(|&i| region.ops[i].operands.get(value_at[&i]))
            .filter_map(|&u| f.ty(u).as_tensor())
            .map(|t| t.num_elements() as u64)
            .collect();
        let elements = match sizes.len() {
            1 => sizes.into_iter().next(),
            _ => None,
        };
        let mut node = Node::Updates {
            ops: ops.clone(),
            producers: Vec::new(),
            outputs: Vec::new(),
        };
        let is_value = |&(i, at): &(usize, usize)| value_at.get(&i).is_some_and(|&pos| pos == at);
        // The buffers each node reads, with this group's partition.
        let reads_of: Vec<HashSet<ValueId>> = p
            .nodes
            .iter()
            .map(|n| node_reads(region, &def, &p.materialized, n).reads)
            .collect();
        // The nearest producers are considered first, so that those feeding them find their
        // readers taken.
        let mut taken: HashSet<usize> = HashSet::new();
        for k in (0..last).rev() {
            let Node::Kernel(pg) = &p.nodes[k] else {
                continue;
            };
            if pg.kind != super::KernelKind::Loop || remove.contains(&k) {
                continue;
            }
            // Each output is read as members' update values (itself, or through views between
            // the producer and the merged step that only members read), by producers taken
            // (computed inline too), or by others: then the merged kernel writes it as well
            // (`outputs`), if they all come after the merged step.
            let mut grown = pg.clone();
            let mut views = Vec::new();
            let mut others = Vec::new();
            let mut read_as_value = false;
            let mut refused = false;
            let mut defer = Vec::new();
            for &v in &pg.outputs {
                let mut other = false;
                for (j, reads) in reads_of.iter().enumerate() {
                    if j == k || !reads.contains(&v) {
                        continue;
                    }
                    // Producers this step takes compute it inline too.
                    if taken.contains(&j) {
                        read_as_value = true;
                        continue;
                    }
                    // Earlier groups' members: their step reads for them.
                    if remove.contains(&j) {
                        continue;
                    }
                    match &p.nodes[j] {
                        Node::Op(i) if value_at.contains_key(i) => {
                            let op = &region.ops[*i];
                            if op
                                .operands
                                .iter()
                                .enumerate()
                                .any(|(at, &o)| o == v && !is_value(&(*i, at)))
                            {
                                refused = true;
                            }
                            read_as_value = true;
                        }
                        Node::Alias { op, value: a, .. }
                            if j > k
                                && j < last
                                && uses.get(a).is_some_and(|ua| {
                                    !ua.is_empty() && ua.iter().all(is_value)
                                })
                                && region.ops.get(*op).is_some_and(|o| o.operands == [v]) =>
                        {
                            read_as_value = true;
                            views.push(j);
                            grown.members.insert(*a);
                            grown.outputs.push(*a);
                        }
                        _ if j > last || deferred.contains_key(&j) || defer.contains(&j) => {
                            other = true
                        }
                        // A kernel between them that can run after the merged step instead,
                        // with the kernels after it that read what it writes (a recurrent
                        // cell's backward products of the gate gradients the step stacks):
                        // they read the output written.
                        _ => match deferrable(
                            &p.nodes,
                            &reads_of,
                            &targets,
                            &taken,
                            &value_at,
                            (j, last),
                        ) {
                            Some(set) => {
                                other = true;
                                for n in set {
                                    if !defer.contains(&n) {
                                        defer.push(n);
                                    }
                                }
                            }
                            None => refused = true,
                        },
                    }
                }
                if other {
                    others.push(v);
                }
            }
            if refused || !read_as_value {
                continue;
            }
            // The outputs written have the updates' element count (a scan step's carry beside
            // its stacked values) and 32-bit elements, each its own word.
            let fits = |v: &ValueId| {
                f.ty(*v).as_tensor().is_some_and(|t| {
                    t.dtype.byte_size() == 4 && Some(t.num_elements() as u64) == elements
                })
            };
            if !others.is_empty() && (!write_outputs || !others.iter().all(fits)) {
                continue;
            }
            let Node::Updates {
                producers, outputs, ..
            } = &mut node
            else {
                continue;
            };
            // Nor may a producer read a buffer the kernel updates.
            let targets_read = !reads_of[k].is_disjoint(&targets);
            producers.push(grown);
            let written = outputs.len() + others.len();
            // Bindings: the buffers read but not updated, one per update, one per output.
            let reads = node_reads(region, &def, &p.materialized, &node).reads;
            let inputs = reads.difference(&targets).count();
            if targets_read || inputs + ops.len() + written > max_bindings {
                if let Node::Updates { producers, .. } = &mut node {
                    producers.pop();
                }
                continue;
            }
            if let Node::Updates { outputs, .. } = &mut node {
                outputs.extend(others);
            }
            for j in defer {
                deferred.insert(j, last);
            }
            remove.insert(k);
            taken.insert(k);
            remove.extend(views.iter().copied());
            taken.extend(views);
        }
        if let Node::Updates {
            producers, outputs, ..
        } = &node
        {
            if producers.is_empty() && g.len() < 2 {
                continue;
            }
            for g in producers {
                for v in &g.outputs {
                    if !outputs.contains(v) {
                        p.materialized.remove(v);
                    }
                }
            }
        }
        p.nodes[last] = node;
        remove.extend(earlier.iter().copied());
    }
    let mut nodes: Vec<Option<Node>> = std::mem::take(&mut p.nodes).into_iter().map(Some).collect();
    let mut after: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for (&j, &at) in &deferred {
        after.entry(at).or_default().push(j);
    }
    for list in after.values_mut() {
        list.sort_unstable();
    }
    for k in 0..nodes.len() {
        if remove.contains(&k) || deferred.contains_key(&k) {
            continue;
        }
        if let Some(n) = nodes[k].take() {
            p.nodes.push(n);
        }
        for &j in after.get(&k).into_iter().flatten() {
            if let Some(n) = nodes[j].take() {
                p.nodes.push(n);
            }
        }
    }
    p
}

/// The kernels that would run right after a merged step (whose last member is node `last`,
/// updating `targets`; `taken`: the nodes it computes inline; `members`: its updates' op
/// indices) if kernel node `j` did: `j` and
/// every kernel up to the step reading what one of them writes. `None` if one of them reads a
/// buffer the step updates, or what they write is read up to the step by anything but such a
/// kernel, or a step other than a kernel, view, constant or the merged step's own update lies
/// between.
fn deferrable(
    nodes: &[Node],
    reads_of: &[HashSet<ValueId>],
    targets: &HashSet<ValueId>,
    taken: &HashSet<usize>,
    members: &std::collections::HashMap<usize, usize>,
    (j, last): (usize, usize),
) -> Option<Vec<usize>> {
    let Some(Node::Kernel(gj)) = nodes.get(j) else {
        return None;
    };
    if !reads_of[j].is_disjoint(targets) || taken.contains(&j) {
        return None;
    }
    let mut set = vec![j];
    let mut written: HashSet<ValueId> = gj.outputs.iter().copied().collect();
    for n in j + 1..=last {
        let reads_moved = reads_of[n].iter().any(|v| written.contains(v));
        match &nodes[n] {
            Node::Kernel(gn) if reads_moved => {
                if !reads_of[n].is_disjoint(targets) || taken.contains(&n) {
                    return None;
                }
                set.push(n);
                written.extend(gn.outputs.iter().copied());
            }
            Node::Kernel(_) | Node::Constant(_) => {}
            Node::Alias { .. } if !reads_moved => {}
            // The merged step's own updates (still in their places here).
            Node::Op(i) if !reads_moved && members.contains_key(i) => {}
            _ => return None,
        }
    }
    Some(set)
}

#[cfg(test)]
mod tests {
    use crate::fusion::{with_partition, Node};

    fn nodes(src: &str) -> Vec<String> {
        with_partition(src, true, nodes_of)
    }

    fn nodes_of(region: &crate::ir::Region, p: &crate::fusion::Partition) -> Vec<String> {
        p.nodes
            .iter()
            .map(|n| match n {
                Node::Updates {
                    ops,
                    producers,
                    outputs,
                } => {
                    format!(
                        "updates{}+{}{}",
                        ops.len(),
                        producers.len(),
                        if outputs.is_empty() {
                            String::new()
                        } else {
                            format!(" writing {}", outputs.len())
                        }
                    )
                }
                Node::Alias { .. } => "view".into(),
                Node::Op(i) => region.ops[*i].name(),
                Node::Kernel(_) => "kernel".into(),
                _ => "other".into(),
            })
            .collect()
    }

    /// Three stacks updated at row `i`, one of them read again after its update.
    const STACKS: &str = r#"
func.func @main(%a: tensor<64x256xf32>, %b: tensor<64x256xf32>, %c: tensor<64x256xf32>, %x: tensor<1x256xf32>, %i: tensor<i32>) -> (tensor<64x256xf32>, tensor<64x256xf32>, tensor<64x256xf32>, tensor<64x256xf32>) {
  %z = stablehlo.constant dense<0> : tensor<i32>
  %y = stablehlo.exponential %x : tensor<1x256xf32>
  %a2 = stablehlo.dynamic_update_slice %a, %x, %i, %z : (tensor<64x256xf32>, tensor<1x256xf32>, tensor<i32>, tensor<i32>) -> tensor<64x256xf32>
  %b2 = stablehlo.dynamic_update_slice %b, %y, %i, %z : (tensor<64x256xf32>, tensor<1x256xf32>, tensor<i32>, tensor<i32>) -> tensor<64x256xf32>
  %c2 = stablehlo.dynamic_update_slice %c, %x, %i, %z : (tensor<64x256xf32>, tensor<1x256xf32>, tensor<i32>, tensor<i32>) -> tensor<64x256xf32>
  %d = stablehlo.add %b2, %b2 : tensor<64x256xf32>
  return %a2, %b2, %c2, %d : tensor<64x256xf32>, tensor<64x256xf32>, tensor<64x256xf32>, tensor<64x256xf32>
}"#;

    #[test]
    fn independent_updates_merge() {
        let n = nodes(STACKS);
        assert_eq!(
            n.iter().filter(|s| s.starts_with("updates")).count(),
            1,
            "{n:?}"
        );
        // `%y`, read by one update only, is computed by the merged kernel.
        assert!(n.contains(&"updates3+1".to_string()), "{n:?}");
        // The kernel reading `%b2` comes after the merged step.
        let u = n.iter().position(|s| s == "updates3+1");
        let k = n.iter().rposition(|s| s == "kernel");
        assert!(u < k, "{n:?}");
    }

    /// A step's carry `%y`, returned, stacked through a view, and read by the other stacked
    /// value's computation (a scan step stacking its carry and a value of it).
    const CARRY: &str = r#"
func.func @main(%a: tensor<64x256xf32>, %b: tensor<64x256xf32>, %x: tensor<256xf32>, %i: tensor<i32>) -> (tensor<64x256xf32>, tensor<64x256xf32>, tensor<256xf32>) {
  %z = stablehlo.constant dense<0> : tensor<i32>
  %y = stablehlo.exponential %x : tensor<256xf32>
  %w = stablehlo.multiply %y, %y : tensor<256xf32>
  %y1 = stablehlo.reshape %y : (tensor<256xf32>) -> tensor<1x256xf32>
  %w1 = stablehlo.reshape %w : (tensor<256xf32>) -> tensor<1x256xf32>
  %a2 = stablehlo.dynamic_update_slice %a, %y1, %i, %z : (tensor<64x256xf32>, tensor<1x256xf32>, tensor<i32>, tensor<i32>) -> tensor<64x256xf32>
  %b2 = stablehlo.dynamic_update_slice %b, %w1, %i, %z : (tensor<64x256xf32>, tensor<1x256xf32>, tensor<i32>, tensor<i32>) -> tensor<64x256xf32>
  return %a2, %b2, %y : tensor<64x256xf32>, tensor<64x256xf32>, tensor<256xf32>
}"#;

    #[test]
    fn the_update_step_writes_the_carry() {
        let n = nodes(CARRY);
        assert_eq!(
            n.iter().filter(|s| *s == "kernel" || *s == "view").count(),
            0,
            "{n:?}"
        );
        assert_eq!(
            n.iter()
                .filter(|s| s.starts_with("updates2+") && s.ends_with("writing 1"))
                .count(),
            1,
            "{n:?}"
        );
    }

    /// A step's value `%y`, stacked and read by a product before the update (a recurrent
    /// cell's backward step: the gate gradients, stacked, times the weights).
    const READ_BY_A_DOT: &str = r#"
func.func @main(%a: tensor<64x16xf32>, %x: tensor<8x16xf32>, %w: tensor<16x16xf32>, %i: tensor<i32>) -> (tensor<64x16xf32>, tensor<8x16xf32>) {
  %z = stablehlo.constant dense<0> : tensor<i32>
  %y = stablehlo.exponential %x : tensor<8x16xf32>
  %d = stablehlo.dot_general %y, %w, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %a2 = stablehlo.dynamic_update_slice %a, %y, %i, %z : (tensor<64x16xf32>, tensor<8x16xf32>, tensor<i32>, tensor<i32>) -> tensor<64x16xf32>
  return %a2, %d : tensor<64x16xf32>, tensor<8x16xf32>
}"#;

    /// `src`'s one update step takes the producer and writes its output, and the `products`
    /// kernels reading it all run after the step.
    fn products_after_the_step(src: &str, products: usize) {
        let n = nodes(src);
        let u = n.iter().position(|s| s == "updates1+1 writing 1");
        let k = n.iter().position(|s| s == "kernel");
        assert!(u.is_some() && u < k, "{n:?}");
        assert_eq!(
            n.iter().filter(|s| *s == "kernel").count(),
            products,
            "{n:?}"
        );
    }

    #[test]
    fn a_product_of_the_stacked_value_runs_after_the_update_step() {
        products_after_the_step(READ_BY_A_DOT, 1);
    }

    /// As [`READ_BY_A_DOT`], with a second product of the first (the kernels after a deferred
    /// one that read what it writes move with it).
    const READ_BY_TWO_DOTS: &str = r#"
func.func @main(%a: tensor<64x16xf32>, %x: tensor<8x16xf32>, %w: tensor<16x16xf32>, %i: tensor<i32>) -> (tensor<64x16xf32>, tensor<8x16xf32>) {
  %z = stablehlo.constant dense<0> : tensor<i32>
  %y = stablehlo.exponential %x : tensor<8x16xf32>
  %d = stablehlo.dot_general %y, %w, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %e = stablehlo.dot_general %d, %w, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %a2 = stablehlo.dynamic_update_slice %a, %y, %i, %z : (tensor<64x16xf32>, tensor<8x16xf32>, tensor<i32>, tensor<i32>) -> tensor<64x16xf32>
  return %a2, %e : tensor<64x16xf32>, tensor<8x16xf32>
}"#;

    #[test]
    fn the_products_after_it_move_with_the_first() {
        products_after_the_step(READ_BY_TWO_DOTS, 2);
    }
}
