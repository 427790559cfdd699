//! Identifier newtypes. Ids end up in file paths and URLs, so parsing one is
//! also the path-traversal check: only `[A-Za-z0-9_-]`, 1 to 128 characters.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind}: must be 1-128 characters of A-Z, a-z, 0-9, '_' or '-'")]
pub struct IdError {
    pub kind: &'static str,
}

fn valid(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            pub fn parse(s: &str) -> Result<Self, IdError> {
                if valid(s) {
                    Ok(Self(s.to_owned()))
                } else {
                    Err(IdError { kind: $kind })
                }
            }

            /// A fresh, time-ordered id (UUIDv7 digits behind a type prefix),
            /// built from 16 bytes the caller took from a clock and a CSPRNG.
            pub fn from_uuid_bytes(bytes: [u8; 16]) -> Self {
                Self(format!(concat!($prefix, "{}"), hex::encode(bytes)))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_type!(
    /// One captured delta of one transcript.
    RunId, "run id", "r"
);
id_type!(
    /// A family member.
    UserId, "user id", "u"
);
id_type!(
    /// A device registered to a user.
    MachineId, "machine id", "m"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_reject_path_tricks_and_accept_plain_ids() {
        for bad in [
            "", "..", "../etc", "a/b", "a\\b", "a b", "a.b", "%2e%2e", "\u{e9}",
        ] {
            assert!(RunId::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(RunId::parse(&"x".repeat(129)).is_err());
        for good in ["r0192", "abc_DEF-9", &"x".repeat(128)] {
            assert_eq!(
                RunId::parse(good).map(|r| r.to_string()),
                Ok(good.to_string())
            );
        }
    }

    #[test]
    fn generated_ids_parse() {
        let id = RunId::from_uuid_bytes([7; 16]);
        assert!(id.as_str().starts_with('r'));
        assert_eq!(RunId::parse(id.as_str()), Ok(id));
    }
}
