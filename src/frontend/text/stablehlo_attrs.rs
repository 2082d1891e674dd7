//! The typed StableHLO attributes: enums (`#stablehlo<comparison_direction GT>` and the
//! `#stablehlo.comparison_direction<GT>` spelling), dimension-number structs (`#stablehlo.dot`,
//! `gather`, `scatter`, `conv` in both its compact and `raw` forms), `dot_algorithm`,
//! `channel_handle`, `output_operand_alias`, `result_accuracy`. Other dialect attributes are
//! kept as opaque text.

use super::cursor::Pos;
use super::parser::Parser;
use crate::ir::attr::{
    Attr, ChannelHandle, ComparisonDirection, ComparisonType, ConvDimensionNumbers, DotAlgorithm,
    DotDimensionNumbers, FftType, GatherDimensionNumbers, OutputOperandAlias, Precision,
    ResultAccuracy, ResultAccuracyMode, RngAlgorithm, RngDistribution, ScatterDimensionNumbers,
    Transpose,
};
use crate::ir::types::ElementType;
use crate::Result;

/// Builds the typed attribute for enum kind `kind` with case `value`.
fn enum_attr(kind: &str, value: &str) -> Option<Option<Attr>> {
    Some(match kind {
        "comparison_direction" => {
            ComparisonDirection::from_name(value).map(Attr::ComparisonDirection)
        }
        "comparison_type" => ComparisonType::from_name(value).map(Attr::ComparisonType),
        "precision" => Precision::from_name(value).map(Attr::Precision),
        "fft_type" => FftType::from_name(value).map(Attr::FftType),
        "rng_distribution" => RngDistribution::from_name(value).map(Attr::RngDistribution),
        "rng_algorithm" => RngAlgorithm::from_name(value).map(Attr::RngAlgorithm),
        "transpose" => Transpose::from_name(value).map(Attr::Transpose),
        _ => return None,
    })
}

impl Parser<'_> {
    /// `#name<...>` at the `<`; `start` is the offset of `#`.
    pub fn dialect_attr(&mut self, name: &str, start: Pos) -> Result<Attr> {
        let opaque = |p: &mut Self| -> Result<Attr> {
            p.cur.skip_balanced()?;
            let text = p.cur.src.get(start..p.cur.pos).unwrap_or("");
            Ok(Attr::Opaque(text.to_string()))
        };
        if name == "stablehlo" {
            let save = self.cur.pos;
            self.cur.expect(b'<')?;
            let kind = self.cur.expect_bare_id("an attribute kind")?;
            let value = self.cur.bare_id();
            if let (Some(value), true) = (value, self.cur.peek() == Some(b'>')) {
                if let Some(parsed) = enum_attr(kind, value) {
                    self.cur.pos += 1;
                    return parsed.ok_or_else(|| {
                        self.cur
                            .error_at(start, format!("unknown {kind} `{value}`"))
                    });
                }
            }
            self.cur.pos = save;
            return opaque(self);
        }
        let Some(kind) = name.strip_prefix("stablehlo.") else {
            return opaque(self);
        };
        if enum_attr(kind, "").is_some() {
            self.cur.expect(b'<')?;
            let vpos = self.cur.pos;
            let value = self.cur.expect_bare_id("an enum value")?;
            self.cur.expect(b'>')?;
            return enum_attr(kind, value)
                .flatten()
                .ok_or_else(|| self.cur.error_at(vpos, format!("unknown {kind} `{value}`")));
        }
        match kind {
            "dot" => self.dot_dims_struct().map(Attr::DotDimensionNumbers),
            "dot_algorithm" => {
                self.cur.expect(b'<')?;
                self.dot_algorithm_body().map(Attr::DotAlgorithm)
            }
            "gather" => self.gather_dims().map(Attr::GatherDimensionNumbers),
            "scatter" => self.scatter_dims().map(Attr::ScatterDimensionNumbers),
            "conv" => {
                self.cur.expect(b'<')?;
                if self.cur.eat_keyword("raw") {
                    self.conv_dims_raw().map(Attr::ConvDimensionNumbers)
                } else {
                    let d = self.conv_dims_compact()?;
                    self.cur.expect(b'>')?;
                    Ok(Attr::ConvDimensionNumbers(d))
                }
            }
            "channel_handle" => {
                let mut h = ChannelHandle {
                    handle: 0,
                    channel_type: 0,
                };
                self.cur.expect(b'<')?;
                self.struct_fields(|p, key| {
                    match key {
                        "handle" => h.handle = p.cur.int_lit()?,
                        "type" => h.channel_type = p.cur.int_lit()?,
                        _ => return Ok(false),
                    }
                    Ok(true)
                })?;
                Ok(Attr::ChannelHandle(h))
            }
            "output_operand_alias" => {
                let mut o = OutputOperandAlias {
                    output_tuple_indices: Vec::new(),
                    operand_index: 0,
                    operand_tuple_indices: Vec::new(),
                };
                self.cur.expect(b'<')?;
                self.struct_fields(|p, key| {
                    match key {
                        "output_tuple_indices" => o.output_tuple_indices = p.dim_list()?,
                        "operand_index" => o.operand_index = p.cur.int_lit()?,
                        "operand_tuple_indices" => o.operand_tuple_indices = p.dim_list()?,
                        _ => return Ok(false),
                    }
                    Ok(true)
                })?;
                Ok(Attr::OutputOperandAlias(o))
            }
            "result_accuracy" => self.result_accuracy().map(Attr::ResultAccuracy),
            _ => opaque(self),
        }
    }

    /// Fields `key = value` separated by commas up to `>` (after `<`); `field` parses the
    /// value of `key` and returns false for unknown keys.
    fn struct_fields(
        &mut self,
        mut field: impl FnMut(&mut Self, &str) -> Result<bool>,
    ) -> Result<()> {
        if self.cur.eat(b'>') {
            return Ok(());
        }
        loop {
            self.cur.skip_ws();
            let kpos = self.cur.pos;
            let key = self.cur.expect_bare_id("a field name")?;
            self.cur.expect(b'=')?;
            if !field(self, key)? {
                return Err(self.cur.error_at(kpos, format!("unknown field `{key}`")));
            }
            if self.cur.eat(b'>') {
                return Ok(());
            }
            self.cur.expect(b',')?;
        }
    }

    /// `<lhs_batching_dimensions = [..], ...>`.
    fn dot_dims_struct(&mut self) -> Result<DotDimensionNumbers> {
        let mut d = DotDimensionNumbers::default();
        self.cur.expect(b'<')?;
        self.struct_fields(|p, key| {
            match key {
                "lhs_batching_dimensions" => d.lhs_batching_dimensions = p.dim_list()?,
                "rhs_batching_dimensions" => d.rhs_batching_dimensions = p.dim_list()?,
                "lhs_contracting_dimensions" => d.lhs_contracting_dimensions = p.dim_list()?,
                "rhs_contracting_dimensions" => d.rhs_contracting_dimensions = p.dim_list()?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(d)
    }

    /// The fields of a dot algorithm after `<`, through `>`.
    pub fn dot_algorithm_body(&mut self) -> Result<DotAlgorithm> {
        let mut a = DotAlgorithm {
            lhs_precision_type: ElementType::F32,
            rhs_precision_type: ElementType::F32,
            accumulation_type: ElementType::F32,
            lhs_component_count: 1,
            rhs_component_count: 1,
            num_primitive_operations: 1,
            allow_imprecise_accumulation: false,
        };
        self.struct_fields(|p, key| {
            p.cur.skip_ws();
            let vpos = p.cur.pos;
            match key {
                "lhs_precision_type" => a.lhs_precision_type = p.scalar_type(vpos)?,
                "rhs_precision_type" => a.rhs_precision_type = p.scalar_type(vpos)?,
                "accumulation_type" => a.accumulation_type = p.scalar_type(vpos)?,
                "lhs_component_count" => a.lhs_component_count = p.cur.int_lit()?,
                "rhs_component_count" => a.rhs_component_count = p.cur.int_lit()?,
                "num_primitive_operations" => a.num_primitive_operations = p.cur.int_lit()?,
                "allow_imprecise_accumulation" => {
                    a.allow_imprecise_accumulation = p.bool_lit()?;
                }
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(a)
    }

    /// `true` or `false`.
    pub fn bool_lit(&mut self) -> Result<bool> {
        if self.cur.eat_keyword("true") {
            Ok(true)
        } else if self.cur.eat_keyword("false") {
            Ok(false)
        } else {
            Err(self.cur.expected("`true` or `false`"))
        }
    }

    fn gather_dims(&mut self) -> Result<GatherDimensionNumbers> {
        let mut d = GatherDimensionNumbers::default();
        self.cur.expect(b'<')?;
        self.struct_fields(|p, key| {
            match key {
                "offset_dims" => d.offset_dims = p.dim_list()?,
                "collapsed_slice_dims" => d.collapsed_slice_dims = p.dim_list()?,
                "operand_batching_dims" => d.operand_batching_dims = p.dim_list()?,
                "start_indices_batching_dims" => d.start_indices_batching_dims = p.dim_list()?,
                "start_index_map" => d.start_index_map = p.dim_list()?,
                "index_vector_dim" => d.index_vector_dim = p.cur.int_lit()?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(d)
    }

    fn scatter_dims(&mut self) -> Result<ScatterDimensionNumbers> {
        let mut d = ScatterDimensionNumbers::default();
        self.cur.expect(b'<')?;
        self.struct_fields(|p, key| {
            match key {
                "update_window_dims" => d.update_window_dims = p.dim_list()?,
                "inserted_window_dims" => d.inserted_window_dims = p.dim_list()?,
                "input_batching_dims" => d.input_batching_dims = p.dim_list()?,
                "scatter_indices_batching_dims" => {
                    d.scatter_indices_batching_dims = p.dim_list()?
                }
                "scatter_dims_to_operand_dims" => d.scatter_dims_to_operand_dims = p.dim_list()?,
                "index_vector_dim" => d.index_vector_dim = p.cur.int_lit()?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(d)
    }

    /// `raw input_batch_dimension = 0, ...>` (after `raw`).
    fn conv_dims_raw(&mut self) -> Result<ConvDimensionNumbers> {
        let mut d = ConvDimensionNumbers::default();
        self.struct_fields(|p, key| {
            match key {
                "input_batch_dimension" => d.input_batch_dimension = p.cur.int_lit()?,
                "input_feature_dimension" => d.input_feature_dimension = p.cur.int_lit()?,
                "input_spatial_dimensions" => d.input_spatial_dimensions = p.dim_list()?,
                "kernel_input_feature_dimension" => {
                    d.kernel_input_feature_dimension = p.cur.int_lit()?
                }
                "kernel_output_feature_dimension" => {
                    d.kernel_output_feature_dimension = p.cur.int_lit()?
                }
                "kernel_spatial_dimensions" => d.kernel_spatial_dimensions = p.dim_list()?,
                "output_batch_dimension" => d.output_batch_dimension = p.cur.int_lit()?,
                "output_feature_dimension" => d.output_feature_dimension = p.cur.int_lit()?,
                "output_spatial_dimensions" => d.output_spatial_dimensions = p.dim_list()?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(d)
    }

    /// `[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]`.
    pub fn conv_dims_compact(&mut self) -> Result<ConvDimensionNumbers> {
        let (in_sp, in_named) = self.conv_dim_list(['b', 'f'])?;
        self.cur.expect_keyword("x")?;
        let (k_sp, k_named) = self.conv_dim_list(['i', 'o'])?;
        self.cur.expect_arrow()?;
        let (out_sp, out_named) = self.conv_dim_list(['b', 'f'])?;
        Ok(ConvDimensionNumbers {
            input_batch_dimension: in_named[0],
            input_feature_dimension: in_named[1],
            input_spatial_dimensions: in_sp,
            kernel_input_feature_dimension: k_named[0],
            kernel_output_feature_dimension: k_named[1],
            kernel_spatial_dimensions: k_sp,
            output_batch_dimension: out_named[0],
            output_feature_dimension: out_named[1],
            output_spatial_dimensions: out_sp,
        })
    }

    /// One `[...]` of the compact conv form: positions of spatial dims 0..n and of the two
    /// named dims.
    fn conv_dim_list(&mut self, names: [char; 2]) -> Result<(Vec<i64>, [i64; 2])> {
        self.cur.expect(b'[')?;
        let start = self.cur.pos;
        let mut spatial: Vec<Option<i64>> = Vec::new();
        let mut named = [-1i64; 2];
        let mut index = 0i64;
        loop {
            self.cur.skip_ws();
            let item = self.cur.pos;
            if self.cur.at_number() {
                let s = self.cur.int_lit()?;
                let s = usize::try_from(s)
                    .ok()
                    .filter(|&s| s < 1024)
                    .ok_or_else(|| self.cur.error_at(item, "bad spatial dimension"))?;
                if spatial.len() <= s {
                    spatial.resize(s + 1, None);
                }
                match spatial.get_mut(s) {
                    Some(slot @ None) => *slot = Some(index),
                    _ => return Err(self.cur.error_at(item, "duplicate spatial dimension")),
                }
            } else {
                let k = self.cur.expect_bare_id("a dimension")?;
                let which = names
                    .iter()
                    .position(|&n| k.len() == 1 && k.starts_with(n))
                    .ok_or_else(|| {
                        self.cur
                            .error_at(item, format!("unexpected dimension `{k}`"))
                    })?;
                if named[which] >= 0 {
                    return Err(self
                        .cur
                        .error_at(item, format!("duplicate dimension `{k}`")));
                }
                named[which] = index;
            }
            index += 1;
            if self.cur.eat(b']') {
                break;
            }
            self.cur.expect(b',')?;
        }
        if named.iter().any(|&n| n < 0) {
            return Err(self.cur.error_at(
                start,
                format!("expected dimensions `{}` and `{}`", names[0], names[1]),
            ));
        }
        let spatial = spatial
            .into_iter()
            .map(|s| s.ok_or_else(|| self.cur.error_at(start, "missing spatial dimension")))
            .collect::<Result<Vec<_>>>()?;
        Ok((spatial, named))
    }

    /// `<atol = .., rtol = .., ulps = .., mode = #stablehlo.result_accuracy_mode<M>>` (each
    /// of atol, rtol, ulps optional).
    fn result_accuracy(&mut self) -> Result<ResultAccuracy> {
        let mut r = ResultAccuracy {
            atol: 0.0,
            rtol: 0.0,
            ulps: 0,
            mode: ResultAccuracyMode::Default,
        };
        self.cur.expect(b'<')?;
        self.struct_fields(|p, key| {
            p.cur.skip_ws();
            let vpos = p.cur.pos;
            match key {
                "atol" | "rtol" => {
                    let v = p
                        .cur
                        .number()?
                        .to_f64()
                        .ok_or_else(|| p.cur.error_at(vpos, "bad tolerance"))?;
                    if key == "atol" {
                        r.atol = v;
                    } else {
                        r.rtol = v;
                    }
                }
                "ulps" => r.ulps = p.cur.int_lit()?,
                "mode" => {
                    let mode = if p.cur.eat_str("#stablehlo.result_accuracy_mode<") {
                        let m = p.cur.expect_bare_id("a mode")?;
                        p.cur.expect(b'>')?;
                        m
                    } else {
                        p.cur.expect_bare_id("a mode")?
                    };
                    r.mode = ResultAccuracyMode::from_name(mode)
                        .ok_or_else(|| p.cur.error_at(vpos, format!("unknown mode `{mode}`")))?;
                }
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(r)
    }
}
