//! StableHLO versions: the ones this reader supports and the one an artifact's producer string
//! names (`StableHLO_v1.22.0`).

use std::fmt;

/// A StableHLO (VHLO) version, `major.minor.patch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Version {
    major: u32,
    minor: u32,
    patch: u32,
}

impl Version {
    /// A version from its parts.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Version {
            major,
            minor,
            patch,
        }
    }

    /// Parses `X.Y.Z`.
    pub fn parse(s: &str) -> Option<Self> {
        let mut parts = s.split('.').map(|p| p.parse::<u32>().ok());
        let v = Version::new(parts.next()??, parts.next()??, parts.next()??);
        parts.next().is_none().then_some(v)
    }

    /// The version named by a StableHLO producer string (`StableHLO_v1.22.0`).
    pub fn from_producer(producer: &str) -> Option<Self> {
        Version::parse(producer.strip_prefix("StableHLO_v")?)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The newest version read (see `STABLEHLO_CURRENT_VERSION`).
pub(crate) const CURRENT: Version = Version::new(1, 22, 0);
/// The oldest version read (see `STABLEHLO_MINIMUM_VERSION`).
pub(crate) const MINIMUM: Version = Version::new(0, 9, 0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_producers() {
        assert_eq!(
            Version::from_producer("StableHLO_v1.22.0"),
            Some(Version::new(1, 22, 0))
        );
        assert_eq!(Version::from_producer("MLIR20.0.0git"), None);
        assert_eq!(Version::parse("1.2"), None);
        assert!(Version::new(0, 10, 0) > Version::new(0, 9, 9));
        assert_eq!(CURRENT.to_string(), super::super::STABLEHLO_CURRENT_VERSION);
        assert_eq!(MINIMUM.to_string(), super::super::STABLEHLO_MINIMUM_VERSION);
    }
}
