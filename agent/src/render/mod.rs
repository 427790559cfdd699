//! What kith prints of central's answers, pure: `term` for a person's
//! terminal (styling, printable text, ages), `conversation` for
//! conversations there (`kith show`, `kith tree`, `kith search`), `plain` for
//! an agent's context window (`kith mcp`, `kith context`), cut to a token
//! budget. Commands, `kith mcp` and `kith status` import these; these import
//! no command.

pub(crate) mod conversation;
pub(crate) mod plain;
pub(crate) mod term;
