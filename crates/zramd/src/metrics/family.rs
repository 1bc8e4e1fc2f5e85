//! Writing one metric family with `prometheus-client`'s encoder: a descriptor (`HELP`,
//! `TYPE`, `UNIT`), then one sample per label set.

use std::fmt;

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

/// A family's type: counters get `_total` from the encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A cumulative count.
    Counter,
    /// A value that goes up and down.
    Gauge,
}

/// A family's unit, appended to its name (`_bytes`, `_seconds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Of {
    /// No unit (a count of things).
    Count,
    /// Bytes.
    Bytes,
    /// Seconds.
    Seconds,
}

impl Of {
    /// The encoder's unit.
    pub(super) fn unit(self) -> Option<Unit> {
        match self {
            Of::Count => None,
            Of::Bytes => Some(Unit::Bytes),
            Of::Seconds => Some(Unit::Seconds),
        }
    }
}

/// A family's name (without unit and type suffixes), unit, type and help.
pub(super) type Descriptor<'a> = (&'a str, Of, Kind, &'a str);

/// A sample's value: whole or fractional.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Value {
    /// A whole number.
    Int(u64),
    /// A fraction (seconds).
    Float(f64),
}

/// The descriptor of a family; samples follow on the encoder it returns.
fn descriptor<'a>(
    encoder: &'a mut DescriptorEncoder<'_>,
    (name, _, kind, help): Descriptor<'a>,
    unit: Option<&'a Unit>,
) -> Result<MetricEncoder<'a>, fmt::Error> {
    let metric_type = match kind {
        Kind::Counter => MetricType::Counter,
        Kind::Gauge => MetricType::Gauge,
    };
    encoder.encode_descriptor(name, help, unit, metric_type)
}

/// One sample of a family.
fn put(sample: &mut MetricEncoder<'_>, kind: Kind, value: Value) -> fmt::Result {
    match (kind, value) {
        (Kind::Counter, Value::Int(v)) => sample.encode_counter::<NoLabelSet, _, u64>(&v, None),
        (Kind::Counter, Value::Float(v)) => sample.encode_counter::<NoLabelSet, _, f64>(&v, None),
        (Kind::Gauge, Value::Int(v)) => sample.encode_gauge(&v),
        (Kind::Gauge, Value::Float(v)) => sample.encode_gauge(&v),
    }
}

/// One family: its descriptor, then a sample per `(labels, value)`.
pub(super) fn family<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder<'_>,
    d: Descriptor<'_>,
    samples: impl IntoIterator<Item = (L, Value)>,
) -> fmt::Result {
    let unit = d.1.unit();
    let mut metric = descriptor(encoder, d, unit.as_ref())?;
    for (labels, value) in samples {
        put(&mut metric.encode_family(&labels)?, d.2, value)?;
    }
    Ok(())
}

/// A family with one sample and no labels.
pub(super) fn single(
    encoder: &mut DescriptorEncoder<'_>,
    d: Descriptor<'_>,
    value: Value,
) -> fmt::Result {
    let unit = d.1.unit();
    put(&mut descriptor(encoder, d, unit.as_ref())?, d.2, value)
}
