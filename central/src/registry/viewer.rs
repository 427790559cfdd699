//! Who is asking: the `Viewer` a bearer token or a web session resolves to.
//! Its fields are private and only the registry builds one (from the machine
//! row a token's hash names, or the session row a cookie's hash names), so
//! every read that takes a `&Viewer` is a read on behalf of an authenticated
//! member, never of a caller-made identity.

use kith_shared::ids::{MachineId, UserId};

use crate::privacy::{Grant, Readability};

/// The authenticated user (and machine, for a token) behind a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Viewer {
    user_id: UserId,
    /// The machine whose token made the request; `None` in a web session
    /// (a browser is no machine: it reads, it never ingests).
    machine: Option<(MachineId, String)>,
    handle: String,
    is_admin: bool,
    /// What this user may read: its own runs and its live grants, as of
    /// this request.
    readability: Readability,
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
            readability: Readability::new(user_id.clone(), Vec::new()),
            user_id,
            machine,
            handle,
            is_admin,
        }
    }

    pub(super) fn set_grants(&mut self, grants: Vec<Grant>) {
        self.readability = Readability::new(self.user_id.clone(), grants);
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

    /// What this viewer may read (`privacy`): every read of runs renders it.
    pub fn readability(&self) -> &Readability {
        &self.readability
    }
}
