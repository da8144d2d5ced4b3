//! Which connections serve keeps: every connection is accepted, then admitted within two
//! bounds, [`MAX_CONNECTIONS`] in all and [`MAX_PER_PEER`] from one address. Over a bound, the
//! connection that made progress least recently and is not being answered is shed to make room
//! (the newcomer only where every other is being answered): clients that connect and idle, or
//! trickle a request, cannot hold serve's capacity against a scraper, whose request arrives
//! whole with its connection and is answered at once.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::sync::Notify;

/// Connections open at once, at most.
pub const MAX_CONNECTIONS: usize = 256;
/// Connections open at once from one address, at most: a quarter of the whole, so that a few
/// addresses cannot take it all (a Prometheus needs one connection; a load test from one host,
/// a few dozen).
pub const MAX_PER_PEER: usize = 64;

/// The connections admitted.
pub struct Admission {
    started: Instant,
    table: Mutex<Table>,
    max_connections: usize,
    max_per_peer: usize,
}

#[derive(Default)]
struct Table {
    next_id: u64,
    open: HashMap<u64, Arc<Connection>>,
    per_peer: HashMap<IpAddr, usize>,
}

/// What the admission knows of one open connection.
pub struct Connection {
    peer: IpAddr,
    /// The admission's start, which `active_ms` counts from.
    epoch: Instant,
    /// A request is being answered.
    busy: AtomicBool,
    /// When it last made progress (admitted, a request received or answered), in ms from
    /// `epoch`.
    active_ms: AtomicU64,
    /// Told when the connection is shed.
    shed: Notify,
}

impl Connection {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// A request arrived; until [`Connection::answered`], it is not shed.
    pub fn answering(&self) {
        self.active_ms.store(self.now_ms(), Ordering::Relaxed);
        self.busy.store(true, Ordering::Relaxed);
    }

    /// Its request was answered (or the answer abandoned).
    pub fn answered(&self) {
        self.active_ms.store(self.now_ms(), Ordering::Relaxed);
        self.busy.store(false, Ordering::Relaxed);
    }

    /// Resolves when the connection is shed to make room for another.
    pub async fn shed(&self) {
        self.shed.notified().await;
    }

    /// Resolves once the connection has made no progress for `timeout`.
    pub async fn stalled(&self, timeout: Duration) {
        let timeout_ms = timeout.as_millis() as u64;
        loop {
            let due = self.active_ms.load(Ordering::Relaxed) + timeout_ms;
            let now = self.now_ms();
            if now >= due {
                return;
            }
            tokio::time::sleep(Duration::from_millis(due - now)).await;
        }
    }
}

/// A connection's place, given back when dropped.
pub struct Admitted {
    admission: Arc<Admission>,
    id: u64,
    pub connection: Arc<Connection>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.admission.table().remove(self.id);
    }
}

impl Admission {
    pub fn new() -> Arc<Self> {
        Self::with_bounds(MAX_CONNECTIONS, MAX_PER_PEER)
    }

    fn with_bounds(max_connections: usize, max_per_peer: usize) -> Arc<Self> {
        Arc::new(Self {
            started: Instant::now(),
            table: Mutex::default(),
            max_connections,
            max_per_peer,
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        // The table is consistent between statements: a panic elsewhere leaves it usable.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a connection from `peer`, shedding another where a bound is reached; `None` when
    /// every connection that would have to go is being answered.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<Admitted> {
        let mut table = self.table();
        if table.per_peer.get(&peer).copied().unwrap_or(0) >= self.max_per_peer {
            table.shed_one(Some(peer))?;
        }
        if table.open.len() >= self.max_connections {
            table.shed_one(None)?;
        }
        let id = table.next_id;
        table.next_id += 1;
        let connection = Arc::new(Connection {
            peer,
            epoch: self.started,
            busy: AtomicBool::new(false),
            active_ms: AtomicU64::new(self.started.elapsed().as_millis() as u64),
            shed: Notify::new(),
        });
        table.open.insert(id, connection.clone());
        *table.per_peer.entry(peer).or_default() += 1;
        Some(Admitted { admission: self.clone(), id, connection })
    }

    /// Connections open now.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.table().open.len()
    }
}

impl Table {
    /// Sheds the connection (of `peer`, or of anyone) idle the longest, not being answered;
    /// `None` when there is none.
    fn shed_one(&mut self, peer: Option<IpAddr>) -> Option<()> {
        let (&id, _) = self
            .open
            .iter()
            .filter(|(_, c)| peer.is_none_or(|p| c.peer == p) && !c.busy.load(Ordering::Relaxed))
            .min_by_key(|(id, c)| (c.active_ms.load(Ordering::Relaxed), **id))?;
        let connection = self.remove(id)?;
        // A permit is stored if its task is not waiting yet: it ends as soon as it looks.
        connection.shed.notify_one();
        Some(())
    }

    fn remove(&mut self, id: u64) -> Option<Arc<Connection>> {
        let connection = self.open.remove(&id)?;
        if let Some(n) = self.per_peer.get_mut(&connection.peer) {
            *n -= 1;
            if *n == 0 {
                self.per_peer.remove(&connection.peer);
            }
        }
        Some(connection)
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
    }

    fn is_open(admission: &Admission, admitted: &Admitted) -> bool {
        admission.table().open.contains_key(&admitted.id)
    }

    /// Over the bound, the least recently active idle connection goes, never one being
    /// answered; only where all are answered is the newcomer refused.
    #[test]
    fn the_longest_idle_is_shed_never_one_being_answered() {
        let admission = Admission::with_bounds(3, 3);
        let first = admission.admit(ip(1)).unwrap();
        let second = admission.admit(ip(2)).unwrap();
        let third = admission.admit(ip(3)).unwrap();
        first.connection.answering();
        let fourth = admission.admit(ip(4)).unwrap();
        assert!(!is_open(&admission, &second), "the oldest idle one is shed");
        assert!([&first, &third, &fourth].iter().all(|a| is_open(&admission, a)));
        drop(second);
        assert_eq!(admission.open(), 3, "a shed connection frees no second place");
        third.connection.answering();
        fourth.connection.answering();
        assert!(admission.admit(ip(5)).is_none(), "all three are being answered");
        first.connection.answered();
        let fifth = admission.admit(ip(5)).unwrap();
        assert!(!is_open(&admission, &first), "answered, it is idle again");
        drop((first, third, fourth, fifth));
        assert_eq!(admission.open(), 0);
    }

    /// A peer at its bound sheds its own connections, not others'.
    #[test]
    fn a_peer_at_its_bound_sheds_its_own() {
        let admission = Admission::with_bounds(10, 2);
        let other = admission.admit(ip(6)).unwrap();
        let first = admission.admit(ip(5)).unwrap();
        let second = admission.admit(ip(5)).unwrap();
        let third = admission.admit(ip(5)).unwrap();
        assert!(!is_open(&admission, &first));
        assert!([&other, &second, &third].iter().all(|a| is_open(&admission, a)));
        assert_eq!(admission.table().per_peer[&ip(5)], 2);
    }
}
