//! Logging in: the server's greeting (Handshake v10), perfpilot's HandshakeResponse41, and
//! the authentication exchange after it (auth switch, caching_sha2_password's extra round).

use std::io::{Read, Write};

use sha1::Sha1;
use sha2::{Digest, Sha256};

use super::super::reader::Fault;
use super::packet::{EOF, ERR, Fields, OK, Packets, ServerError, printable};

/// The 4.1 protocol (every server since 2004).
const CLIENT_PROTOCOL_41: u32 = 0x0200;
/// A length-prefixed authentication response of up to 255 bytes.
const CLIENT_SECURE_CONNECTION: u32 = 0x8000;
/// Named authentication plugins and auth switch requests.
const CLIENT_PLUGIN_AUTH: u32 = 0x0008_0000;
/// What perfpilot asks for; no database, no TLS, no compression, the classic EOF packets.
const CLIENT_CAPS: u32 = 0x0001 /* LONG_PASSWORD */ | 0x2000 /* TRANSACTIONS */ | CLIENT_PROTOCOL_41
        | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH;
/// utf8_general_ci: known to every server (names and values here are ASCII anyway).
const CHARSET: u8 = 33;
/// The largest greeting read: real ones are about 100 bytes, so more means another protocol.
const GREETING_LIMIT: usize = 64 << 10;
/// The largest authentication packet read.
const AUTH_LIMIT: usize = 64 << 10;
/// Authentication rounds after the response before giving up on a server that keeps asking.
const MAX_ROUNDS: usize = 4;

const NATIVE: &str = "mysql_native_password";
const CACHING_SHA2: &str = "caching_sha2_password";

/// Who logs in, and what to say when refused.
pub(super) struct Login<'a> {
    /// The user name.
    pub(super) user: &'a str,
    /// The password (`None`: none, as for MariaDB's unix_socket authentication).
    pub(super) password: Option<&'a str>,
    /// Whether the connection is a Unix socket, where a password may be sent in the clear.
    pub(super) unix: bool,
    /// The `[[preset]]` field to name when the server refuses.
    pub(super) field: &'static str,
    /// Which credentials were tried, for messages ("user monitor with the configured password").
    pub(super) tried: String,
}

impl Login<'_> {
    fn refused(&self, why: String) -> Fault {
        Fault::Auth(self.field, why)
    }
}

/// The server's greeting, as far as logging in needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Greeting {
    /// The server's version (`5.5.5-10.11.19-MariaDB-0+deb12u1`).
    pub(super) version: String,
    /// The server's capability flags.
    pub(super) caps: u32,
    /// The scramble's nonce (20 bytes).
    pub(super) nonce: Vec<u8>,
    /// The default authentication plugin, when the server names one.
    pub(super) plugin: Option<String>,
}

impl Greeting {
    /// Parses a Handshake v10 payload.
    pub(super) fn parse(p: &[u8]) -> Result<Greeting, Fault> {
        let mut f = Fields::new(p, "the greeting");
        let protocol = f.u8()?;
        if protocol != 10 {
            return Err(Fault::Garbage(format!(
                "a greeting of protocol {protocol}, not 10: {}",
                printable(p)
            )));
        }
        let version = String::from_utf8_lossy(f.nul_terminated()).into_owned();
        let _connection_id = f.u32()?;
        let mut nonce = f.bytes(8)?.to_vec();
        let _filler = f.u8()?;
        let mut caps = u32::from(f.u16()?);
        let mut nonce_len = 0;
        if !f.is_empty() {
            let _charset = f.u8()?;
            let _status = f.u16()?;
            caps |= u32::from(f.u16()?) << 16;
            nonce_len = usize::from(f.u8()?);
            let _reserved = f.bytes(10)?;
        }
        if caps & CLIENT_SECURE_CONNECTION != 0 {
            let rest = f.bytes(nonce_len.saturating_sub(8).max(13))?;
            nonce.extend_from_slice(rest.strip_suffix(&[0]).unwrap_or(rest));
        }
        let plugin = (caps & CLIENT_PLUGIN_AUTH != 0)
            .then(|| String::from_utf8_lossy(f.nul_terminated()).into_owned())
            .filter(|p| !p.is_empty());
        Ok(Greeting {
            version,
            caps,
            nonce,
            plugin,
        })
    }

    /// The version without MariaDB's `5.5.5-` prefix (kept for old replication clients).
    pub(super) fn server(&self) -> &str {
        self.version.strip_prefix("5.5.5-").unwrap_or(&self.version)
    }
}

/// Logs in on a new connection: reads the greeting, answers it, and follows the server's
/// requests until it accepts (the greeting is returned) or refuses.
pub(super) fn log_in<S: Read + Write>(
    p: &mut Packets<S>,
    login: &Login,
) -> Result<Greeting, Fault> {
    let first = p.read(GREETING_LIMIT).map_err(|f| match f {
        Fault::TooLarge(_) => Fault::Garbage("a first packet over 64 KiB, not a greeting".into()),
        other => other,
    })?;
    if first.first() == Some(&ERR) {
        // Refused before the handshake: too many connections, or a host it does not admit.
        return Err(ServerError::parse(&first)?.fault(login.field, &login.tried));
    }
    let greeting = Greeting::parse(&first)?;
    let needed = CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION;
    if greeting.caps & needed != needed {
        return Err(Fault::Unsupported(format!(
            "the server ({}) predates MySQL 4.1's protocol, which perfpilot needs",
            greeting.version
        )));
    }
    let mut plugin = greeting
        .plugin
        .clone()
        .filter(|p| p == CACHING_SHA2)
        .unwrap_or_else(|| NATIVE.to_string());
    let data = auth_data(&plugin, &greeting.nonce, login)?;
    p.write(&response(&greeting, login.user, &data, &plugin)?)?;
    for _ in 0..MAX_ROUNDS {
        let r = p.read(AUTH_LIMIT)?;
        match r.first().copied() {
            Some(OK) => return Ok(greeting),
            Some(ERR) => return Err(ServerError::parse(&r)?.fault(login.field, &login.tried)),
            Some(EOF) if r.len() == 1 => {
                return Err(login.refused(format!(
                    "the server asks {} for a pre-4.1 password scramble, which perfpilot does \
                     not speak",
                    login.tried
                )));
            }
            Some(EOF) => {
                // Auth switch: another plugin, with its own nonce.
                let mut f = Fields::new(&r[1..], "an authentication switch");
                plugin = String::from_utf8_lossy(f.nul_terminated()).into_owned();
                let rest = f.rest();
                let nonce = rest.strip_suffix(&[0]).unwrap_or(rest);
                p.write(&auth_data(&plugin, nonce, login)?)?;
            }
            Some(0x01) if plugin == CACHING_SHA2 => match r.get(1) {
                // The server had the scramble cached: its OK follows.
                Some(3) => {}
                // Full authentication: the password itself, which only a local socket may carry.
                Some(4) if login.unix => {
                    let mut clear = login.password.unwrap_or("").as_bytes().to_vec();
                    clear.push(0);
                    p.write(&clear)?;
                }
                Some(4) => {
                    return Err(login.refused(format!(
                        "{CACHING_SHA2} wants a full authentication of {}, which over TCP needs \
                         TLS or the server's RSA key (perfpilot uses neither): give the \
                         server's Unix socket as `socket`, or log in once with the same user so \
                         the server caches it, or give the user {NATIVE}",
                        login.tried
                    )));
                }
                _ => return Err(Fault::Garbage(printable(&r))),
            },
            _ => return Err(Fault::Garbage(printable(&r))),
        }
    }
    Err(Fault::Failed(format!(
        "the server kept asking for more authentication after {MAX_ROUNDS} answers"
    )))
}

/// The HandshakeResponse41 payload: perfpilot's capabilities, the user, the plugin's answer.
fn response(g: &Greeting, user: &str, data: &[u8], plugin: &str) -> Result<Vec<u8>, Fault> {
    let caps = CLIENT_CAPS & (g.caps | !CLIENT_PLUGIN_AUTH);
    let data_len = u8::try_from(data.len())
        .map_err(|_| Fault::Failed("the authentication answer is over 255 bytes".into()))?;
    let mut out = Vec::with_capacity(64 + user.len() + data.len());
    out.extend_from_slice(&caps.to_le_bytes());
    out.extend_from_slice(&(1u32 << 24).to_le_bytes());
    out.push(CHARSET);
    out.extend_from_slice(&[0; 23]);
    out.extend_from_slice(user.as_bytes());
    out.push(0);
    out.push(data_len);
    out.extend_from_slice(data);
    if caps & CLIENT_PLUGIN_AUTH != 0 {
        out.extend_from_slice(plugin.as_bytes());
        out.push(0);
    }
    Ok(out)
}

/// The answer of authentication plugin `plugin` to `nonce`.
fn auth_data(plugin: &str, nonce: &[u8], login: &Login) -> Result<Vec<u8>, Fault> {
    let password = login.password.unwrap_or("");
    match plugin {
        NATIVE => Ok(native_scramble(nonce, password)),
        CACHING_SHA2 => Ok(sha2_scramble(nonce, password)),
        // The server checks the client's OS user on the socket itself; nothing to send.
        "unix_socket" | "auth_socket" => Ok(Vec::new()),
        "mysql_clear_password" if login.unix => {
            let mut clear = password.as_bytes().to_vec();
            clear.push(0);
            Ok(clear)
        }
        other => Err(login.refused(format!(
            "{} needs the authentication plugin {other}, which perfpilot does not speak over \
             this connection (it speaks {NATIVE}, {CACHING_SHA2}, unix_socket and, over a Unix \
             socket, mysql_clear_password)",
            login.tried
        ))),
    }
}

/// mysql_native_password: `SHA1(password) XOR SHA1(nonce + SHA1(SHA1(password)))`; nothing
/// for no password.
pub(super) fn native_scramble(nonce: &[u8], password: &str) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let once = Sha1::digest(password.as_bytes());
    let twice = Sha1::digest(once.as_slice());
    let mix = Sha1::new()
        .chain_update(nonce)
        .chain_update(twice.as_slice())
        .finalize();
    once.iter().zip(mix.iter()).map(|(a, b)| a ^ b).collect()
}

/// caching_sha2_password's fast path: `SHA256(password) XOR SHA256(SHA256(SHA256(password))
/// + nonce)`; nothing for no password.
pub(super) fn sha2_scramble(nonce: &[u8], password: &str) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let once = Sha256::digest(password.as_bytes());
    let twice = Sha256::digest(once.as_slice());
    let mix = Sha256::new()
        .chain_update(twice.as_slice())
        .chain_update(nonce)
        .finalize();
    once.iter().zip(mix.iter()).map(|(a, b)| a ^ b).collect()
}

#[cfg(test)]
#[path = "auth_tests.rs"]
mod tests;
