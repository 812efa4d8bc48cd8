//! What to build: the structure ([`Kind`]), its construction parameters ([`Params`]) and which
//! data each structure takes ([`check_kind`]). Every builder (the CPU's here, the GPU's in
//! voisin-cuda) reads them; nothing here builds.

use std::fmt;
use std::str::FromStr;

use voisin::{Dataset, Error, Metric, Result};

use crate::space;

/// Which structure to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The List of Clusters: centers with the items nearest them, searched in build order.
    Lc,
    /// Sparse Spatial Selection: pivots far apart and every item's distances to them.
    Sss,
    /// The cover tree: nested levels of radii bʲ, searched best first.
    Cover,
    /// The k-d tree: vectors under cityblock, euclidean, chebyshev or minkowski:P only.
    Kd,
}

impl Kind {
    /// The metric-space structures, which take every true metric (strings included).
    pub const ALL: [Kind; 3] = [Kind::Lc, Kind::Sss, Kind::Cover];
    /// Every structure.
    pub const EVERY: [Kind; 4] = [Kind::Lc, Kind::Sss, Kind::Cover, Kind::Kd];

    /// The structure's name on the command line and in messages: lc, sss, cover or kd (what
    /// [`Kind`]'s `FromStr` reads back).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Lc => "lc",
            Kind::Sss => "sss",
            Kind::Cover => "cover",
            Kind::Kd => "kd",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Kind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Kind::EVERY
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "unknown index kind '{s}' (known: lc, sss, cover, kd)"
                ))
            })
    }
}

/// Construction parameters; each structure reads its own.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    /// List of Clusters: items per cluster, center included.
    pub cluster_size: usize,
    /// SSS: a new pivot is at least α·M from every pivot (M estimates the largest distance).
    pub alpha: f64,
    /// SSS: at most this many pivots.
    pub max_pivots: usize,
    /// Cover tree: the base of the level radii (> 1).
    pub base: f64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            cluster_size: 32,
            alpha: 0.5,
            max_pivots: 64,
            base: 2.0,
        }
    }
}

impl Params {
    /// Checks the values before a long build starts.
    pub fn check(&self) -> Result<()> {
        if self.cluster_size == 0 {
            return Err(Error::invalid("cluster size must be at least 1"));
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return Err(Error::invalid(format!("alpha {} must be > 0", self.alpha)));
        }
        if self.max_pivots == 0 {
            return Err(Error::invalid("at least one pivot is needed"));
        }
        if !(self.base.is_finite() && self.base > 1.0) {
            return Err(Error::invalid(format!(
                "cover tree base {} must be > 1",
                self.base
            )));
        }
        Ok(())
    }
}

/// The k-d tree needs coordinates and a coordinate-wise metric.
pub fn check_kind(data: &Dataset, metric: &Metric, kind: Kind) -> Result<()> {
    let boxes = space::box_order(metric).is_some();
    if kind == Kind::Kd && !(boxes && matches!(data, Dataset::Vectors(_))) {
        return Err(Error::invalid(format!(
            "the kd index takes vectors under euclidean, cityblock, chebyshev or minkowski:P, \
             not {} under {metric} (use lc, sss or cover)",
            data.describe()
        )));
    }
    Ok(())
}
