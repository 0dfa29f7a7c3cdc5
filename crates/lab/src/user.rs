//! The system users servers run as (PostgreSQL refuses to run as root).

use std::path::Path;

/// The uid and gid of `user` in the passwd file at `passwd` (`/etc/passwd`), or `None` when
/// the file cannot be read or has no such user.
pub fn ids_in(passwd: &Path, user: &str) -> Option<(u32, u32)> {
    parse_passwd(&std::fs::read_to_string(passwd).ok()?, user)
}

/// The uid and gid of `user` from `/etc/passwd`.
pub fn ids(user: &str) -> Option<(u32, u32)> {
    ids_in(Path::new("/etc/passwd"), user)
}

/// The uid and gid of `user` in passwd text.
fn parse_passwd(text: &str, user: &str) -> Option<(u32, u32)> {
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 4 && f[0] == user).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_is_found_in_passwd_text() {
        let text = "root:x:0:0:root:/root:/bin/bash\npostgres:x:105:110:PostgreSQL:/var/lib/postgresql:/bin/bash\nbroken:x:zz:1::/:/bin/sh\n";
        assert_eq!(parse_passwd(text, "postgres"), Some((105, 110)));
        assert_eq!(parse_passwd(text, "nobody"), None);
        assert_eq!(parse_passwd(text, "broken"), None);
    }
}
