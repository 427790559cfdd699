//! Who is asking: the `Viewer` a bearer token or a web session resolves to.
//! Its fields are private and only the registry builds one (from the machine
//! row a token's hash names, or the session row a cookie's hash names), so
//! every read that takes a `&Viewer` is a read on behalf of an authenticated
//! member, never of a caller-made identity.

use kith_shared::ids::{MachineId, UserId};

use super::Grant;

/// The authenticated user (and machine, for a token) behind a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Viewer {
    user_id: UserId,
    /// The machine whose token made the request; `None` in a web session
    /// (a browser is no machine: it reads, it never ingests).
    machine: Option<(MachineId, String)>,
    handle: String,
    is_admin: bool,
    /// Live grants this user received, as of this request.
    grants: Vec<Grant>,
}

impl Viewer {
    /// Only the registry makes viewers: from a token's machine row or a
    /// web session's user row.
    pub(super) fn new(
        user_id: UserId,
        machine: Option<(MachineId, String)>,
        handle: String,
        is_admin: bool,
    ) -> Self {
        Self {
            user_id,
            machine,
            handle,
            is_admin,
            grants: Vec::new(),
        }
    }

    pub(super) fn set_grants(&mut self, grants: Vec<Grant>) {
        self.grants = grants;
    }

    pub fn user_id(&self) -> &UserId {
        &self.user_id
    }

    pub fn machine_id(&self) -> Option<&MachineId> {
        self.machine.as_ref().map(|(id, _)| id)
    }

    pub fn machine_name(&self) -> Option<&str> {
        self.machine.as_ref().map(|(_, name)| name.as_str())
    }

    pub fn handle(&self) -> &str {
        &self.handle
    }

    pub fn is_admin(&self) -> bool {
        self.is_admin
    }

    pub fn grants(&self) -> &[Grant] {
        &self.grants
    }

    /// A viewer for the unit tests of the index backends, which have no
    /// registry.
    #[cfg(test)]
    pub fn for_tests(user: &str, grants: Vec<Grant>) -> Self {
        let mut v = Self::new(
            UserId::parse(user).unwrap_or_else(|_| UserId::from_uuid_bytes([0; 16])),
            Some((MachineId::from_uuid_bytes([0; 16]), "test".into())),
            user.into(),
            false,
        );
        v.grants = grants;
        v
    }
}
