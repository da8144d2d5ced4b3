//! Basic auth against the bcrypt hashes of a web configuration's `basic_auth_users`. bcrypt is
//! slow on purpose (some 50 ms at cost 10): a password that verified is remembered, as a
//! SHA-256 digest of user and password, one per user of the file at most, so that a scraper's
//! requests after its first cost a digest each, not a bcrypt. A wrong password, or an unknown
//! user (checked against another user's hash, so that it takes as long), costs a bcrypt every
//! time, one at a time on a blocking thread: a flood of wrong passwords slows the wrong
//! passwords, not the HTTP worker.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Mutex, PoisonError},
};

use anyhow::Context as _;
use base64::Engine as _;
use ring::digest;
use tokio::sync::Semaphore;

/// The users of a web configuration, and the passwords verified so far.
pub struct Users {
    hashes: BTreeMap<String, String>,
    verified: Mutex<HashMap<String, digest::Digest>>,
    /// One bcrypt at a time.
    bcrypt: Semaphore,
}

impl Users {
    /// The users and their bcrypt hashes (`$2a$`, `$2b$` or `$2y$`), each hash checked.
    pub fn new(hashes: BTreeMap<String, String>) -> anyhow::Result<Self> {
        anyhow::ensure!(!hashes.is_empty(), "basic_auth_users has no user");
        for (user, hash) in &hashes {
            anyhow::ensure!(!user.contains(':'), "user {user:?}: a user name cannot hold ':'");
            hash.parse::<bcrypt::HashParts>()
                .with_context(|| format!("user {user:?}: not a bcrypt hash"))?;
        }
        Ok(Self { hashes, verified: Mutex::default(), bcrypt: Semaphore::new(1) })
    }

    /// Whether an `Authorization` header's value names a user of the file with its password.
    pub async fn allow(&self, authorization: Option<&[u8]>) -> bool {
        let Some((user, password)) = authorization.and_then(basic_credentials) else {
            return false;
        };
        let seen = credential_digest(&user, &password);
        if self.verified().get(&user).is_some_and(|v| v.as_ref() == seen.as_ref()) {
            return true;
        }
        let (known, hash) = match self.hashes.get(&user) {
            Some(hash) => (true, hash.clone()),
            // Any hash of the file: as long to refuse as a wrong password.
            None => (false, self.hashes.values().next().cloned().unwrap_or_default()),
        };
        let Ok(_one_at_a_time) = self.bcrypt.acquire().await else { return false };
        let verified =
            tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash).unwrap_or(false))
                .await
                .unwrap_or(false);
        if known && verified {
            self.verified().insert(user, seen);
        }
        known && verified
    }

    fn verified(&self) -> std::sync::MutexGuard<'_, HashMap<String, digest::Digest>> {
        self.verified.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The user and password of a `Basic` authorization.
fn basic_credentials(authorization: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(authorization).ok()?;
    let (scheme, encoded) = text.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let (user, password) = String::from_utf8(decoded)
        .ok()?
        .split_once(':')
        .map(|(u, p)| (u.to_owned(), p.to_owned()))?;
    Some((user, password))
}

/// What is remembered of a password that verified: a digest, never the password.
fn credential_digest(user: &str, password: &str) -> digest::Digest {
    let mut context = digest::Context::new(&digest::SHA256);
    context.update(user.as_bytes());
    context.update(&[0]);
    context.update(password.as_bytes());
    context.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(user: &str, password: &str) -> Vec<u8> {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!("Basic {encoded}").into_bytes()
    }

    /// The right password passes (the second time from the cache, without a bcrypt); a wrong
    /// one, an unknown user, another scheme or no header do not.
    #[tokio::test]
    async fn only_a_users_password_passes() {
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let users = Users::new(BTreeMap::from([("prom".to_owned(), hash)])).unwrap();
        assert!(users.allow(Some(&header("prom", "s3cret"))).await);
        assert_eq!(users.verified().len(), 1, "remembered");
        assert!(users.allow(Some(&header("prom", "s3cret"))).await);
        assert!(!users.allow(Some(&header("prom", "wrong"))).await);
        assert!(!users.allow(Some(&header("prom", "s3cret "))).await);
        assert!(!users.allow(Some(&header("nobody", "s3cret"))).await);
        assert!(!users.allow(Some(b"Bearer abc")).await);
        assert!(!users.allow(Some(b"Basic !!!")).await);
        assert!(!users.allow(None).await);
        assert_eq!(users.verified().len(), 1, "nothing remembered of what failed");
        // A password with a colon: only the first one separates the user.
        let users =
            Users::new(BTreeMap::from([("prom".to_owned(), bcrypt::hash("a:b", 4).unwrap())]))
                .unwrap();
        assert!(users.allow(Some(&header("prom", "a:b"))).await);
    }

    #[test]
    fn a_bad_hash_or_user_is_refused() {
        let refused = |user: &str, hash: &str| {
            Users::new(BTreeMap::from([(user.to_owned(), hash.to_owned())])).err().unwrap()
        };
        assert!(format!("{:#}", refused("prom", "plaintext")).contains("not a bcrypt hash"));
        let hash = bcrypt::hash("x", 4).unwrap();
        assert!(refused("a:b", &hash).to_string().contains("cannot hold ':'"));
        assert!(Users::new(BTreeMap::new()).is_err());
    }
}
