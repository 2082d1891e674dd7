//! The cost model behind fusion's duplication decision: a fused value read by several kernels
//! is either computed again in each of them or written once by a kernel of its own and read
//! back by each. This estimates both in nanoseconds for the adapter class, as XLA's priority
//! fusion weighs a producer's duplication against the memory traffic and launch it saves.
//!
//! The estimate is local to one op: its operands are priced as buffer reads. When an operand
//! is itself recomputed, its own decision prices that (its kernel count includes this op's
//! copies), so the costs along a chain add up without walking it.
//!
//! `WGPU_HLO_FUSION_COST=0` turns the model off: only the cheap data-movement ops (and the
//! reductions' `x - max` pattern) are then recomputed, as before the model.

use crate::ir::{BinaryOp, ElementType, Function, Op, Operation, UnaryOp};

/// What one adapter class costs: the rates the estimates divide by.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rates {
    /// Fixed cost of one more kernel launch in a submission (ns).
    pub launch_ns: f64,
    /// Memory bandwidth a kernel sees (bytes per ns).
    pub bytes_per_ns: f64,
    /// Arithmetic throughput (simple f32 ops per ns).
    pub ops_per_ns: f64,
}

impl Rates {
    /// Rates for a CPU adapter (lavapipe: llvmpipe threads, a few cores of 8-wide SIMD) or a
    /// GPU. Orders of magnitude matter here, not digits: on lavapipe one launch costs tens of
    /// microseconds, on a discrete GPU a few.
    pub fn for_adapter(cpu_adapter: bool) -> Rates {
        if cpu_adapter {
            Rates {
                launch_ns: 20_000.0,
                bytes_per_ns: 8.0,
                ops_per_ns: 16.0,
            }
        } else {
            Rates {
                launch_ns: 4_000.0,
                bytes_per_ns: 500.0,
                ops_per_ns: 20_000.0,
            }
        }
    }
}

/// At most this many kernels compute one value again (beyond it the kernels' code grows
/// faster than the model sees).
pub const MAX_COPIES: usize = 8;

/// Simple-op equivalents of computing one element of `op`'s result (the arithmetic alone).
pub fn op_work(f: &Function, op: &Operation) -> f64 {
    use BinaryOp as B;
    use UnaryOp as U;
    let base = match &op.op {
        Op::Unary(u) => match u {
            U::Abs
            | U::Negate
            | U::Not
            | U::Sign
            | U::Ceil
            | U::Floor
            | U::RoundNearestAfz
            | U::RoundNearestEven
            | U::Real
            | U::Imag
            | U::Conj
            | U::IsFinite
            | U::IsInf
            | U::IsNegInf
            | U::IsPosInf
            | U::Square
            | U::Popcnt
            | U::CountLeadingZeros => 1.0,
            U::Sqrt | U::Rsqrt | U::Cbrt => 6.0,
            U::Lgamma | U::Digamma | U::ErfInv | U::BesselI1e => 60.0,
            _ => 20.0,
        },
        Op::Binary(b) => match b {
            B::Divide | B::Remainder => 6.0,
            B::Atan2 | B::Power => 30.0,
            B::Polygamma | B::Zeta => 100.0,
            B::NextAfter | B::Mulhi => 4.0,
            _ => 1.0,
        },
        Op::Compare { .. } | Op::Select | Op::Clamp | Op::Convert | Op::BitcastConvert => 1.0,
        Op::ReducePrecision { .. } => 4.0,
        // Index arithmetic of data movement.
        _ => 2.0,
    };
    let ty = op
        .results
        .first()
        .and_then(|r| f.ty(*r).as_tensor())
        .map(|t| t.dtype);
    // 64-bit and complex arithmetic take several 32-bit operations (or emulation).
    let scale = match ty {
        Some(ElementType::F64 | ElementType::I64 | ElementType::U64) => 4.0,
        Some(t) if t.is_complex() => 4.0,
        _ => 1.0,
    };
    base * scale
}

/// Bytes of `op`'s operands read per element of its result: an operand smaller than the result
/// (a broadcast's, a slice's index) is read in proportion, a larger one (a slice's source)
/// only where the result reads it.
fn operand_bytes_per_element(f: &Function, op: &Operation, elements: f64) -> f64 {
    op.operands
        .iter()
        .filter_map(|o| f.ty(*o).as_tensor())
        .map(|t| {
            let share = (t.num_elements() as f64 / elements.max(1.0)).min(1.0);
            t.dtype.byte_size().max(1) as f64 * share
        })
        .sum()
}

/// The two prices of a value read by several kernels (ns).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// Computed again in each reading kernel.
    pub again_ns: f64,
    /// Written once by a kernel of its own and read back by each.
    pub written_ns: f64,
}

impl Estimate {
    /// Whether computing the value again in each reader is the cheaper way.
    pub fn recompute(&self) -> bool {
        self.again_ns < self.written_ns
    }
}

/// What computing `op`'s result again in each of the `kernels` kernels that read it costs,
/// against writing it once to a buffer of its own and reading it back in each; `None` where
/// the model does not price it (fewer than 2 or more than [`MAX_COPIES`] kernels, data-
/// dependent reads, several results, dynamic shapes).
pub fn estimate(f: &Function, op: &Operation, kernels: usize, rates: Rates) -> Option<Estimate> {
    if !(2..=MAX_COPIES).contains(&kernels) {
        return None;
    }
    // Data-dependent reads, and ops whose element reads need index arithmetic of their own,
    // are not priced: they keep the rule they had.
    if matches!(
        op.op,
        Op::Gather { .. } | Op::DynamicSlice { .. } | Op::DynamicUpdateSlice | Op::Constant(_)
    ) {
        return None;
    }
    let t = op.results.first().and_then(|r| f.ty(*r).as_tensor())?;
    if op.results.len() != 1 || !t.is_static() {
        return None;
    }
    let n = kernels as f64;
    let e = t.num_elements() as f64;
    let out = t.dtype.byte_size().max(1) as f64;
    let reads = operand_bytes_per_element(f, op, e);
    let work = op_work(f, op);
    Some(Estimate {
        // Every reader reads the operands and computes it.
        again_ns: n * e * (reads / rates.bytes_per_ns + work / rates.ops_per_ns),
        // Its own kernel reads the operands and writes the value, each reader reads it.
        written_ns: rates.launch_ns + e * (reads + out * (1.0 + n)) / rates.bytes_per_ns,
    })
}

/// Least simple-op work per element for [`amplified`] to write a value (below it, the sums and
/// selects of a row chain, recomputing is never the dear part).
const AMPLIFIED_MIN_WORK: f64 = 6.0;

/// How many times cheaper writing an [`amplified`] value must look, and how many launches more
/// it must save: a `tanh` of a bias broadcast over the 300 rows of a dot's epilogue stays
/// there (lavapipe: 0.13 ms of `tanh` in the epilogue against a launch of 0.02-0.05 ms).
const AMPLIFIED_MARGIN: f64 = 4.0;
const AMPLIFIED_LAUNCHES: f64 = 8.0;

/// Whether fused value `op`, read by kernels that evaluate it `evaluations` times in all,
/// should be written by a kernel of its own because those kernels evaluate it far more often
/// than it has elements: a per-row `log` or `rsqrt` broadcast along the rows of a large
/// kernel is computed once per element there (one-hot cross-entropy's `log(sum(exp))`:
/// 4M logarithms for 4096 rows). Written once, each reader loads it instead; the estimate
/// weighs the extra evaluations against one more launch and the reads. `work`: the
/// simple-op work of one evaluation, `op`'s own and that of the fused chain computing its
/// operands (`fusion::chain_work`).
pub fn amplified(f: &Function, op: &Operation, work: f64, evaluations: f64, rates: Rates) -> bool {
    if work < AMPLIFIED_MIN_WORK || op.results.len() != 1 {
        return false;
    }
    let Some(t) = op.results.first().and_then(|r| f.ty(*r).as_tensor()) else {
        return false;
    };
    if !t.is_static() {
        return false;
    }
    let e = t.num_elements() as f64;
    if evaluations < 8.0 * e {
        return false;
    }
    let out = t.dtype.byte_size().max(1) as f64;
    let again_ns = evaluations * work / rates.ops_per_ns;
    let written_ns = rates.launch_ns
        + e * (work / rates.ops_per_ns + out / rates.bytes_per_ns)
        // A reader's load of a value it broadcasts mostly hits a cache: priced as one op.
        + evaluations / rates.ops_per_ns;
    // Only a clear win: the per-op work is a rough guess, and a kernel fewer is a sure gain.
    AMPLIFIED_MARGIN * written_ns + AMPLIFIED_LAUNCHES * rates.launch_ns < again_ns
}

/// Whether concatenation `op` of `branches` operands (nested concatenations' included),
/// evaluated at `indices` indices per element of the kernel that reads it, costs more there
/// than written once by a kernel of its own and read back at each
/// index. A CPU adapter runs every operand's branch under a lane mask, so each evaluation
/// reads all of the operands: the gradient of a Gaussian process's likelihood read a
/// five-way concatenation (a blocked triangular solve's pieces, reversed) as it is and
/// transposed, 16 ms for 1M elements on lavapipe.
pub fn masked_branches(
    f: &Function,
    op: &Operation,
    branches: usize,
    indices: u64,
    rates: Rates,
) -> bool {
    let Op::Concatenate { .. } = op.op else {
        return false;
    };
    let k = branches as f64;
    let Some(t) = op.results.first().and_then(|r| f.ty(*r).as_tensor()) else {
        return false;
    };
    if indices < 2 || k < 3.0 || op.results.len() != 1 || !t.is_static() {
        return false;
    }
    let e = t.num_elements() as f64;
    let bytes = t.dtype.byte_size().max(1) as f64;
    let again_ns = indices as f64 * e * k * bytes / rates.bytes_per_ns;
    let written_ns = rates.launch_ns + e * bytes * (2.0 + indices as f64) / rates.bytes_per_ns;
    written_ns < again_ns
}

/// Whether computing `op`'s result again in each of the `kernels` kernels that read it costs
/// less than writing it once to a buffer of its own and reading it back in each (true for
/// one kernel).
pub fn recompute(f: &Function, op: &Operation, kernels: usize, rates: Rates) -> bool {
    if kernels < 2 {
        return true;
    }
    estimate(f, op, kernels, rates).is_some_and(|e| e.recompute())
}

/// The model is on unless `WGPU_HLO_FUSION_COST=0`.
pub fn enabled() -> bool {
    !super::switched_off("WGPU_HLO_FUSION_COST")
}

#[cfg(test)]
mod tests {
    use crate::frontend::text::parse_module;
    use crate::fusion::{with_partition, Node};

    /// Whether fusion writes the first op's result of `main` to a buffer.
    fn written(src: &str, cpu: bool) -> bool {
        with_partition(src, cpu, |region, p| {
            p.materialized.contains(&region.ops[0].results[0])
        })
    }

    /// The kernels of `main`.
    fn kernels(src: &str) -> usize {
        with_partition(src, true, |_, p| {
            p.nodes
                .iter()
                .filter(|n| matches!(n, Node::Kernel(_)))
                .count()
        })
    }

    /// Two kernels read `%v`: results of different shapes, which no later fusion merges.
    fn shared(producer: &str, n: usize) -> String {
        format!(
            r#"
func.func @main(%a: tensor<{n}xf32>, %b: tensor<{n}xf32>) -> (tensor<{n}xf32>, tensor<2x{n}xf32>) {{
  %v = {producer} : tensor<{n}xf32>
  %c = stablehlo.constant dense<2.0> : tensor<{n}xf32>
  %x = stablehlo.multiply %v, %c : tensor<{n}xf32>
  %y = stablehlo.sqrt %x : tensor<{n}xf32>
  %z = stablehlo.abs %v : tensor<{n}xf32>
  %w = stablehlo.broadcast_in_dim %z, dims = [1] : (tensor<{n}xf32>) -> tensor<2x{n}xf32>
  return %y, %w : tensor<{n}xf32>, tensor<2x{n}xf32>
}}"#
        )
    }

    #[test]
    fn row_numbers_read_by_two_kernels_are_computed_in_both() {
        // `iota(0) + 0` (jnp.eye's and jnp.tril's row numbers), read by a kernel before a
        // Cholesky and by one after it: computed from the indices in each, never written.
        let src = r#"
func.func @main(%a: tensor<512x512xf32>) -> (tensor<512x512xf32>) {
  %r = stablehlo.iota dim = 0 : tensor<512x512xi32>
  %z = stablehlo.constant dense<0> : tensor<i32>
  %zb = stablehlo.broadcast_in_dim %z, dims = [] : (tensor<i32>) -> tensor<512x512xi32>
  %v = stablehlo.add %r, %zb : tensor<512x512xi32>
  %c = stablehlo.iota dim = 1 : tensor<512x512xi32>
  %e = stablehlo.compare EQ, %v, %c, SIGNED : (tensor<512x512xi32>, tensor<512x512xi32>) -> tensor<512x512xi1>
  %ef = stablehlo.convert %e : (tensor<512x512xi1>) -> tensor<512x512xf32>
  %k = stablehlo.add %a, %ef : tensor<512x512xf32>
  %l = "stablehlo.cholesky"(%k) {lower = true} : (tensor<512x512xf32>) -> tensor<512x512xf32>
  %t = stablehlo.compare GE, %v, %c, SIGNED : (tensor<512x512xi32>, tensor<512x512xi32>) -> tensor<512x512xi1>
  %zf = stablehlo.constant dense<0.0> : tensor<512x512xf32>
  %y = stablehlo.select %t, %l, %zf : (tensor<512x512xi1>, tensor<512x512xf32>, tensor<512x512xf32>) -> tensor<512x512xf32>
  return %y : tensor<512x512xf32>
}"#;
        for cpu in [true, false] {
            let v = with_partition(src, cpu, |region, p| {
                p.materialized.contains(&region.ops[3].results[0])
            });
            assert!(!v, "cpu {cpu}");
        }
    }

    #[test]
    fn a_cheap_sum_read_by_two_kernels_is_computed_in_both() {
        for cpu in [true, false] {
            for n in [64, 1 << 20] {
                assert!(
                    !written(&shared("stablehlo.add %a, %b", n), cpu),
                    "cpu {cpu}, {n}"
                );
            }
        }
    }

    /// A `power` of two scalars broadcast into a large kernel (Adam's bias corrections): its
    /// operands are scalars, but it is evaluated in every thread of the kernel reading it.
    fn scalar_power(n: usize) -> String {
        format!(
            r#"
func.func @main(%b: tensor<f32>, %t: tensor<f32>, %x: tensor<{n}xf32>) -> tensor<{n}xf32> {{
  %p = stablehlo.power %b, %t : tensor<f32>
  %q = stablehlo.broadcast_in_dim %p, dims = [] : (tensor<f32>) -> tensor<{n}xf32>
  %y = stablehlo.divide %x, %q : tensor<{n}xf32>
  return %y : tensor<{n}xf32>
}}"#
        )
    }

    #[test]
    fn an_expensive_scalar_broadcast_into_a_large_kernel_is_written_once() {
        assert!(written(&scalar_power(1 << 20), true));
        assert!(!written(&scalar_power(1 << 10), true));
        assert!(!written(&scalar_power(1 << 20), false));
    }

    #[test]
    fn an_expensive_value_read_by_two_kernels_is_written_once_where_arithmetic_is_dear() {
        // lavapipe: at 2^20 elements, two more tanh per element cost more than a write and
        // two reads; a small tensor is dominated by the launch the write would add.
        assert!(written(&shared("stablehlo.tanh %a", 1 << 20), true));
        assert!(!written(&shared("stablehlo.tanh %a", 64), true));
        // A GPU's arithmetic is cheap next to its memory traffic.
        assert!(!written(&shared("stablehlo.tanh %a", 1 << 20), false));
    }

    #[test]
    fn the_dump_names_each_priced_decision() {
        let notes = |cpu: bool| {
            with_partition(&shared("stablehlo.tanh %a", 1 << 20), cpu, |region, p| {
                p.describe(region)
            })
        };
        let cpu = notes(true);
        assert!(
            cpu.contains("cost model: %")
                && cpu.contains("stablehlo.tanh read by 2 kernels: written once"),
            "{cpu}"
        );
        let gpu = notes(false);
        assert!(
            gpu.contains("tanh read by 2 kernels: computed in each"),
            "{gpu}"
        );
    }

    /// A per-row logarithm of `rows` rows broadcast along rows of 1000 into a row reduction.
    fn per_row_log(rows: usize) -> String {
        format!(
            r#"
func.func @main(%s: tensor<{rows}xf32>, %x: tensor<{rows}x1000xf32>) -> tensor<{rows}xf32> {{
  %l = stablehlo.log %s : tensor<{rows}xf32>
  %b = stablehlo.broadcast_in_dim %l, dims = [0] : (tensor<{rows}xf32>) -> tensor<{rows}x1000xf32>
  %d = stablehlo.subtract %x, %b : tensor<{rows}x1000xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %r = stablehlo.reduce(%d init: %z) applies stablehlo.add across dimensions = [1] : (tensor<{rows}x1000xf32>, tensor<f32>) -> tensor<{rows}xf32>
  return %r : tensor<{rows}xf32>
}}"#
        )
    }

    #[test]
    fn a_per_row_logarithm_is_written_once_not_computed_per_element() {
        // 4M logarithms for 4096 rows on lavapipe; a GPU computes them faster than it launches.
        let src = per_row_log(4096);
        assert!(written(&src, true));
        assert!(!written(&src, false));
        let notes = with_partition(&src, true, |region, p| p.describe(region));
        assert!(
            notes.contains("stablehlo.log evaluated 4096000 times for 4096 elements"),
            "{notes}"
        );
        // Four rows: the launch would cost more than the logarithms.
        assert!(!written(&per_row_log(4), true));
    }

    #[test]
    fn a_per_channel_chain_is_written_once() {
        // Batch normalization's scale `rsqrt(var / n + eps)` per channel, broadcast over 1.6M
        // elements: the rsqrt alone (6 simple ops) looked cheaper to compute per element than
        // a launch; with the division and the add it reads, the chain is written once.
        let src = r#"
func.func @main(%s: tensor<64xf32>, %x: tensor<25088x64xf32>) -> tensor<25088x64xf32> {
  %n = stablehlo.constant dense<25088.0> : tensor<64xf32>
  %e = stablehlo.constant dense<1.0e-5> : tensor<64xf32>
  %v = stablehlo.divide %s, %n : tensor<64xf32>
  %a = stablehlo.add %v, %e : tensor<64xf32>
  %r = stablehlo.rsqrt %a : tensor<64xf32>
  %b = stablehlo.broadcast_in_dim %r, dims = [1] : (tensor<64xf32>) -> tensor<25088x64xf32>
  %y = stablehlo.multiply %x, %b : tensor<25088x64xf32>
  return %y : tensor<25088x64xf32>
}"#;
        let notes = with_partition(src, true, |region, p| p.describe(region));
        assert!(
            notes.contains("stablehlo.rsqrt evaluated 1605632 times for 64 elements"),
            "{notes}"
        );
        assert!(!with_partition(src, false, |region, p| p
            .describe(region)
            .contains("evaluated")));
    }

    #[test]
    fn a_chain_over_row_results_is_priced_by_its_own_op() {
        // logsumexp's `select(is_finite(max), max, 0)` over row maxima: row fusion computes
        // it once per row in the merged kernel, so its chain does not make it written.
        let src = r#"
func.func @main(%x: tensor<4096x1024xf32>) -> tensor<4096x1024xf32> {
  %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %z = stablehlo.constant dense<0.0> : tensor<4096xf32>
  %m = stablehlo.reduce(%x init: %ninf) applies stablehlo.maximum across dimensions = [1] : (tensor<4096x1024xf32>, tensor<f32>) -> tensor<4096xf32>
  %f = stablehlo.is_finite %m : (tensor<4096xf32>) -> tensor<4096xi1>
  %s = stablehlo.select %f, %m, %z : (tensor<4096xi1>, tensor<4096xf32>, tensor<4096xf32>) -> tensor<4096xf32>
  %t = stablehlo.abs %s : tensor<4096xf32>
  %u = stablehlo.negate %t : tensor<4096xf32>
  %v = stablehlo.abs %u : tensor<4096xf32>
  %w = stablehlo.negate %v : tensor<4096xf32>
  %b = stablehlo.broadcast_in_dim %w, dims = [0] : (tensor<4096xf32>) -> tensor<4096x1024xf32>
  %y = stablehlo.subtract %x, %b : tensor<4096x1024xf32>
  return %y : tensor<4096x1024xf32>
}"#;
        let notes = with_partition(src, true, |region, p| p.describe(region));
        assert!(!notes.contains("evaluated"), "{notes}");
    }

    #[test]
    fn a_value_read_twice_by_one_kernel_is_fused_there() {
        let src = r#"
func.func @main(%a: tensor<1048576xf32>) -> tensor<1048576xf32> {
  %v = stablehlo.tanh %a : tensor<1048576xf32>
  %x = stablehlo.multiply %v, %v : tensor<1048576xf32>
  %y = stablehlo.add %x, %v : tensor<1048576xf32>
  return %y : tensor<1048576xf32>
}"#;
        assert!(!written(src, true));
        assert_eq!(kernels(src), 1);
    }

    #[test]
    fn the_model_can_be_priced_by_hand() {
        let m = parse_module(&shared("stablehlo.divide %a, %b", 1000), "t").expect("parse");
        let f = m.functions.iter().find(|f| f.name == "main").expect("main");
        let op = &f.body.as_ref().expect("body").ops[0];
        assert_eq!(super::op_work(f, op), 6.0);
        let r = super::Rates {
            launch_ns: 0.0,
            bytes_per_ns: 1.0,
            ops_per_ns: 1.0,
        };
        // Materialized: reads 8 + writes 4 + 2 readers x 4 = 20 per element; recomputed:
        // 2 x (8 + 6) = 28.
        assert!(!super::recompute(f, op, 2, r));
        let free = super::Rates {
            ops_per_ns: 1e9,
            ..r
        };
        // Recomputed with free arithmetic: 16 < 20.
        assert!(super::recompute(f, op, 2, free));
        assert!(!super::recompute(f, op, super::MAX_COPIES + 1, free));
    }
}
