//! Logging in: the StartupMessage, the authentication exchange the server asks for (trust and
//! peer need none; a cleartext or md5 password; SCRAM-SHA-256), and the messages up to the
//! first ReadyForQuery.

use std::io::{Read, Write};

use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{ChannelBinding, SCRAM_SHA_256, ScramSha256};
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;

use super::super::reader::Fault;
use super::wire::{Messages, ServerError};

/// The largest message read while logging in (real ones are tens of bytes).
const AUTH_LIMIT: usize = 64 << 10;
/// Messages read before giving up on a server that never says it is ready (PostgreSQL 15
/// sends about 16: authentication, a dozen ParameterStatus, BackendKeyData, ReadyForQuery).
const MAX_MESSAGES: usize = 200;
/// The message types a server sends while a client logs in.
const LOGIN_TAGS: &[u8] = b"REKSNZ";

/// Who logs in, to what, and what to say when refused.
pub(super) struct Login<'a> {
    /// The role.
    pub(super) user: &'a str,
    /// The password, if one is configured.
    pub(super) password: Option<&'a str>,
    /// The database.
    pub(super) dbname: &'a str,
    /// The startup `options` (`-c statement_timeout=…`).
    pub(super) options: &'a str,
    /// Which credentials were tried, for messages ("user monitor with the configured password").
    pub(super) tried: String,
}

/// What the server said about itself while logging in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Server {
    /// `server_version` (`15.14 (Debian 15.14-0+deb12u1)`), when reported.
    pub(super) version: Option<String>,
}

/// Logs in on a new connection: sends the StartupMessage, answers the server's
/// authentication requests, and reads up to ReadyForQuery.
pub(super) fn log_in<S: Read + Write>(m: &mut Messages<S>, login: &Login) -> Result<Server, Fault> {
    let params = [
        ("user", login.user),
        ("database", login.dbname),
        ("application_name", "perfpilot"),
        ("client_encoding", "UTF8"),
        ("options", login.options),
    ];
    m.send("startup message", |b| frontend::startup_message(params, b))?;
    let mut server = Server::default();
    let mut scram: Option<ScramSha256> = None;
    for _ in 0..MAX_MESSAGES {
        match m.read(LOGIN_TAGS, AUTH_LIMIT)? {
            Message::AuthenticationOk | Message::BackendKeyData(_) | Message::NoticeResponse(_) => {
            }
            Message::ParameterStatus(p) => {
                if p.name().ok() == Some("server_version") {
                    server.version = p.value().ok().map(str::to_string);
                }
            }
            Message::ReadyForQuery(_) => return Ok(server),
            Message::ErrorResponse(e) => {
                return Err(ServerError::parse(e.fields())?.fault(&login.tried));
            }
            Message::AuthenticationCleartextPassword => {
                let pw = password(login, "a password in the clear")?;
                m.send("password", |b| frontend::password_message(pw.as_bytes(), b))?;
            }
            Message::AuthenticationMd5Password(body) => {
                let pw = password(login, "an md5 password")?;
                let hash = md5_hash(login.user.as_bytes(), pw.as_bytes(), body.salt());
                m.send("password", |b| {
                    frontend::password_message(hash.as_bytes(), b)
                })?;
            }
            Message::AuthenticationSasl(body) => {
                let mechanisms: Vec<String> = body
                    .mechanisms()
                    .map(|s| Ok(s.to_string()))
                    .collect()
                    .map_err(|e| {
                        Fault::Garbage(format!("a SASL request that does not parse: {e}"))
                    })?;
                if !mechanisms.iter().any(|s| s == SCRAM_SHA_256) {
                    return Err(Fault::Auth(
                        "password",
                        format!(
                            "the server offers {} for {}, and perfpilot speaks only \
                             {SCRAM_SHA_256} (without TLS)",
                            mechanisms.join(", "),
                            login.tried
                        ),
                    ));
                }
                let pw = password(login, "a SCRAM-SHA-256 password")?;
                let s = ScramSha256::new(pw.as_bytes(), ChannelBinding::unsupported());
                m.send("SCRAM first message", |b| {
                    frontend::sasl_initial_response(SCRAM_SHA_256, s.message(), b)
                })?;
                scram = Some(s);
            }
            Message::AuthenticationSaslContinue(body) => {
                let s = scram
                    .as_mut()
                    .ok_or_else(|| out_of_step("a SCRAM continuation"))?;
                s.update(body.data()).map_err(|e| {
                    Fault::Garbage(format!("the server's SCRAM first message is refused: {e}"))
                })?;
                m.send("SCRAM final message", |b| {
                    frontend::sasl_response(s.message(), b)
                })?;
            }
            Message::AuthenticationSaslFinal(body) => {
                let mut s = scram
                    .take()
                    .ok_or_else(|| out_of_step("a SCRAM final message"))?;
                // The server proves that it knows the password too; a server that does not is
                // not the one configured.
                s.finish(body.data()).map_err(|e| {
                    Fault::Failed(format!(
                        "the server's SCRAM proof is wrong ({e}): it does not hold the \
                         configured password; is this the server meant?"
                    ))
                })?;
            }
            Message::AuthenticationKerberosV5
            | Message::AuthenticationScmCredential
            | Message::AuthenticationGss
            | Message::AuthenticationGssContinue(_)
            | Message::AuthenticationSspi => {
                return Err(Fault::Auth(
                    "user` and `password",
                    format!(
                        "the server asks {} for GSSAPI, SSPI or Kerberos authentication, which \
                         perfpilot does not speak: give the role a password (md5 or \
                         scram-sha-256 in pg_hba.conf) or use the server's Unix socket with peer \
                         authentication",
                        login.tried
                    ),
                ));
            }
            _ => return Err(out_of_step("a message")),
        }
    }
    Err(Fault::Failed(format!(
        "the server sent {MAX_MESSAGES} messages while logging in and never said it was ready"
    )))
}

/// The configured password, or an Auth fault naming `password` when there is none.
fn password<'a>(login: &Login<'a>, kind: &str) -> Result<&'a str, Fault> {
    login.password.ok_or_else(|| {
        Fault::Auth(
            "password",
            format!("the server asks {} for {kind}", login.tried),
        )
    })
}

fn out_of_step(what: &str) -> Fault {
    Fault::Garbage(format!(
        "{what} out of step with the authentication exchange"
    ))
}

#[cfg(test)]
#[path = "auth_tests.rs"]
mod tests;
