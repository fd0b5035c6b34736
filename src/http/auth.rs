//! Basic authentication for the HTTP endpoint, against the bcrypt hashes
//! of the web configuration's `basic_auth_users`.
//!
//! bcrypt is slow on purpose (about 70 ms at cost 10), which makes it a
//! lever for anyone who can reach the port: a flood of wrong passwords,
//! each verified on the runtime's worker threads, would stall the consumer
//! loop that shares them. So a verification runs on the blocking pool, at
//! most `http.max_password_checks` at once; a request that waits longer
//! than [`QUEUE_WAIT`] for its turn is answered 503 instead of queueing
//! without bound. A scraper that knows its password pays bcrypt once:
//! successes are remembered (per user, as a SHA-256 of user, hash and
//! password, never the password) and later requests compare against that
//! in constant time. Failures are not remembered, so an attacker cannot
//! fill the memory; the next change of the hash forgets the success.
//!
//! An unknown user's password is hashed at the highest cost among the
//! configured users, as much work as checking a known user's, so the
//! answer's timing does not tell which user names exist.

use base64::Engine;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use subtle::ConstantTimeEq;
use tokio::sync::Semaphore;

/// How long a request waits for a verification slot before it is told
/// the server is busy.
pub const QUEUE_WAIT: Duration = Duration::from_secs(5);

/// What a request's credentials came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// No `Authorization: Basic` header, or one that does not decode.
    NoCredentials,
    /// An unknown user or a wrong password.
    BadCredentials,
    /// Every verification slot stayed taken for [`QUEUE_WAIT`].
    Busy,
}

/// Checks credentials; one per server, shared by its connections.
#[derive(Debug)]
pub struct Authenticator {
    slots: Arc<Semaphore>,
    /// The last success per user: the digest of user, hash and password.
    /// Bounded by the number of configured users (a success needs one).
    successes: Mutex<HashMap<String, [u8; 32]>>,
    /// [`QUEUE_WAIT`], shorter in tests.
    queue_wait: Duration,
}

impl Authenticator {
    pub fn new(max_checks: usize) -> Self {
        Authenticator {
            slots: Arc::new(Semaphore::new(max_checks.max(1))),
            successes: Mutex::default(),
            queue_wait: QUEUE_WAIT,
        }
    }

    /// Whether `authorization` (the header's value) names a user of `users`
    /// with its password; an unknown user costs bcrypt at `decoy_cost`.
    pub async fn check(
        &self,
        users: &HashMap<String, String>,
        decoy_cost: u32,
        authorization: Option<&[u8]>,
    ) -> Verdict {
        let Some((user, password)) = authorization.and_then(credentials) else {
            return Verdict::NoCredentials;
        };
        let hash = users.get(&user).cloned();
        let digest = hash.as_ref().map(|hash| digest(&user, hash, &password));
        if let Some(digest) = &digest
            && self.remembered(&user, digest)
        {
            return Verdict::Allowed;
        }
        let permit = match tokio::time::timeout(self.queue_wait, self.slots.clone().acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            _ => return Verdict::Busy,
        };
        let known = hash.is_some();
        let verified = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            match hash {
                Some(hash) => bcrypt::verify(password.as_bytes(), &hash).unwrap_or(false),
                None => {
                    let _ = bcrypt::hash(password.as_bytes(), decoy_cost);
                    false
                }
            }
        })
        .await
        .unwrap_or(false);
        let (true, Some(digest)) = (verified && known, digest) else {
            return Verdict::BadCredentials;
        };
        if let Ok(mut successes) = self.successes.lock() {
            // Only configured users get here, so the map stays as small as
            // the file; entries of users removed from it go too.
            successes.retain(|u, _| users.contains_key(u));
            successes.insert(user, digest);
        }
        Verdict::Allowed
    }

    fn remembered(&self, user: &str, digest: &[u8; 32]) -> bool {
        let Ok(successes) = self.successes.lock() else { return false };
        successes.get(user).is_some_and(|known| bool::from(known.ct_eq(digest)))
    }
}

/// User and password of an `Authorization: Basic …` value (RFC 7617).
fn credentials(value: &[u8]) -> Option<(String, String)> {
    let value = std::str::from_utf8(value).ok()?.trim();
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

fn digest(user: &str, hash: &str, password: &str) -> [u8; 32] {
    let mut sha = Sha256::new();
    for part in [user, hash, password] {
        // Lengths first: ("ab", "c") and ("a", "bc") must differ.
        sha.update((part.len() as u64).to_le_bytes());
        sha.update(part.as_bytes());
    }
    sha.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(user: &str, password: &str) -> Vec<u8> {
        let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!("Basic {encoded}").into_bytes()
    }

    #[tokio::test]
    async fn credentials_are_checked_and_successes_remembered() {
        let users: HashMap<String, String> = [("alice".to_string(), bcrypt::hash("s3cret:x", 4).unwrap())].into();
        let auth = Authenticator::new(1);
        assert_eq!(auth.check(&users, 4, None).await, Verdict::NoCredentials);
        assert_eq!(auth.check(&users, 4, Some(b"Bearer abc")).await, Verdict::NoCredentials);
        assert_eq!(auth.check(&users, 4, Some(b"Basic !!!")).await, Verdict::NoCredentials);
        assert_eq!(auth.check(&users, 4, Some(&basic("alice", "wrong"))).await, Verdict::BadCredentials);
        assert_eq!(auth.check(&users, 4, Some(&basic("bob", "s3cret:x"))).await, Verdict::BadCredentials);
        assert!(auth.successes.lock().unwrap().is_empty(), "failures are not remembered");
        // A password may hold a colon (RFC 7617: the user name may not).
        assert_eq!(auth.check(&users, 4, Some(&basic("alice", "s3cret:x"))).await, Verdict::Allowed);
        assert_eq!(auth.successes.lock().unwrap().len(), 1);
        assert_eq!(auth.check(&users, 4, Some(b"basic  YWxpY2U6czNjcmV0Ong= ")).await, Verdict::Allowed);
        // A remembered success does not let another password in.
        assert_eq!(auth.check(&users, 4, Some(&basic("alice", "s3cret"))).await, Verdict::BadCredentials);
        // htpasswd writes `$2y$` hashes: the same algorithm under another name.
        let y: HashMap<String, String> =
            [("carol".to_string(), bcrypt::hash("pw", 4).unwrap().replacen("$2b$", "$2y$", 1))].into();
        assert!(y["carol"].starts_with("$2y$04$"));
        assert_eq!(auth.check(&y, 4, Some(&basic("carol", "pw"))).await, Verdict::Allowed);
        // A new hash for the user makes the old password fail.
        let changed: HashMap<String, String> = [("alice".to_string(), bcrypt::hash("new", 4).unwrap())].into();
        assert_eq!(auth.check(&changed, 4, Some(&basic("alice", "s3cret:x"))).await, Verdict::BadCredentials);
    }

    /// With every slot taken, a request is told the server is busy after
    /// the queue wait rather than waiting without bound.
    #[tokio::test]
    async fn a_request_waits_for_a_slot_at_most_the_queue_wait() {
        let users: HashMap<String, String> = [("alice".to_string(), bcrypt::hash("pw", 4).unwrap())].into();
        let auth = Authenticator { queue_wait: Duration::from_millis(20), ..Authenticator::new(1) };
        let _taken = auth.slots.clone().acquire_owned().await.unwrap();
        assert_eq!(auth.check(&users, 4, Some(&basic("alice", "pw"))).await, Verdict::Busy);
    }

    /// An unknown user takes as long as a known one with a wrong password
    /// (bcrypt at the same cost), not a hash lookup's microseconds.
    #[tokio::test]
    async fn an_unknown_user_costs_a_bcrypt() {
        let users: HashMap<String, String> = [("alice".to_string(), bcrypt::hash("pw", 8).unwrap())].into();
        let auth = Authenticator::new(1);
        let time = |user: &'static str| {
            let (auth, users) = (&auth, &users);
            async move {
                let started = std::time::Instant::now();
                assert_eq!(auth.check(users, 8, Some(&basic(user, "nope"))).await, Verdict::BadCredentials);
                started.elapsed()
            }
        };
        let (known, unknown) = (time("alice").await, time("mallory").await);
        assert!(unknown * 3 > known && known * 3 > unknown, "known {known:?}, unknown {unknown:?}");
    }
}
