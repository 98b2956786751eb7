//! A prefill worker's bootstrap rooms: where a prefill request and the decode worker that
//! will continue it meet, by `bootstrap_room`, whichever arrives first. The prefill request
//! waits for the decode side's handshake (SGLang's bootstrap queue: with
//! `--optimistic-prefill-attempts 0` it prefills only once the decode side has sent its KV
//! destinations); the decode side waits for the KV (its transfer queue); the prefill, once its
//! KV has moved, hands off and frees the room (common/conn.py `DeferredBootstrap` keeps the
//! same one-room-one-request rule).

use super::handoff::Handoff;
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::oneshot;

/// The rooms of one prefill worker.
#[derive(Debug, Default)]
pub(crate) struct Rooms {
    slots: Mutex<HashMap<u64, Slot>>,
}

#[derive(Debug, Default)]
struct Slot {
    /// The decode side has asked for the room.
    asked: bool,
    /// A prefill request holds the room.
    held: bool,
    /// The prefill request waiting for the decode side's handshake.
    on_handshake: Option<oneshot::Sender<()>>,
    /// The decode side waiting for the KV.
    on_kv: Option<oneshot::Sender<Handoff>>,
}

/// Another prefill request already holds the room.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Taken;

impl Rooms {
    fn with<R>(&self, f: impl FnOnce(&mut HashMap<u64, Slot>) -> R) -> R {
        match self.slots.lock() {
            Ok(mut s) => f(&mut s),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    /// A prefill request for `room`: the receiver resolves once the decode side has asked.
    pub(crate) fn prefill(&self, room: u64) -> Result<oneshot::Receiver<()>, Taken> {
        self.with(|slots| {
            let slot = slots.entry(room).or_default();
            if slot.held {
                return Err(Taken);
            }
            slot.held = true;
            let (tx, rx) = oneshot::channel();
            if slot.asked {
                let _ = tx.send(());
            } else {
                slot.on_handshake = Some(tx);
            }
            Ok(rx)
        })
    }

    /// The decode side asks for `room`: the receiver resolves with the handoff once the KV has
    /// moved, or closes when the prefill request gave up.
    pub(crate) fn decode(&self, room: u64) -> oneshot::Receiver<Handoff> {
        self.with(|slots| {
            let slot = slots.entry(room).or_default();
            slot.asked = true;
            if let Some(tx) = slot.on_handshake.take() {
                let _ = tx.send(());
            }
            let (tx, rx) = oneshot::channel();
            slot.on_kv = Some(tx);
            rx
        })
    }

    /// The room's KV has moved: hands off to the decode side and frees the room. False when
    /// no decode side was waiting any more.
    pub(crate) fn complete(&self, room: u64, handoff: Handoff) -> bool {
        let slot = self.with(|slots| slots.remove(&room));
        match slot.and_then(|s| s.on_kv) {
            Some(tx) => tx.send(handoff).is_ok(),
            None => false,
        }
    }

    /// The prefill request gave up on `room` (no handshake in time, its client went away, its
    /// prefill failed): the room is freed and a waiting decode side sees it closed.
    pub(crate) fn abandon_prefill(&self, room: u64) {
        self.with(|slots| slots.remove(&room));
    }

    /// The decode side gave up on `room`: the room is freed unless a prefill request holds it
    /// (that one finishes and hands off to nobody).
    pub(crate) fn abandon_decode(&self, room: u64) {
        self.with(|slots| {
            if slots.get(&room).is_some_and(|s| !s.held) {
                slots.remove(&room);
            }
        });
    }

    /// Rooms open now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.with(|slots| slots.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot::error::TryRecvError;

    fn handoff(token: u32) -> Handoff {
        Handoff {
            first_token: Some(token),
            cached_tokens: 3,
            prompt_tokens: 10,
            ..Handoff::default()
        }
    }

    #[test]
    fn the_prefill_waits_for_the_decode_sides_handshake() {
        let rooms = Rooms::default();
        let mut go = rooms.prefill(7).unwrap();
        assert_eq!(go.try_recv(), Err(TryRecvError::Empty));
        let mut kv = rooms.decode(7);
        assert_eq!(go.try_recv(), Ok(()));
        assert_eq!(kv.try_recv(), Err(TryRecvError::Empty));
        assert!(rooms.complete(7, handoff(42)));
        assert_eq!(kv.try_recv().unwrap().first_token, Some(42));
        assert_eq!(rooms.len(), 0, "the room is freed");
    }

    #[test]
    fn the_decode_side_may_ask_first() {
        let rooms = Rooms::default();
        let mut kv = rooms.decode(9);
        let mut go = rooms.prefill(9).unwrap();
        assert_eq!(go.try_recv(), Ok(()), "the handshake already happened");
        assert!(rooms.complete(9, handoff(1)));
        assert_eq!(kv.try_recv().unwrap().cached_tokens, 3);
    }

    #[test]
    fn rooms_do_not_cross() {
        let rooms = Rooms::default();
        let mut go_a = rooms.prefill(1).unwrap();
        let mut go_b = rooms.prefill(2).unwrap();
        let mut kv_b = rooms.decode(2);
        assert_eq!(go_a.try_recv(), Err(TryRecvError::Empty));
        assert_eq!(go_b.try_recv(), Ok(()));
        let mut kv_a = rooms.decode(1);
        assert!(rooms.complete(2, handoff(22)));
        assert!(rooms.complete(1, handoff(11)));
        assert_eq!(kv_a.try_recv().unwrap().first_token, Some(11));
        assert_eq!(kv_b.try_recv().unwrap().first_token, Some(22));
        assert_eq!(go_a.try_recv(), Ok(()));
    }

    #[test]
    fn one_prefill_request_per_room() {
        let rooms = Rooms::default();
        let _go = rooms.prefill(5).unwrap();
        assert_eq!(rooms.prefill(5).unwrap_err(), Taken);
    }

    #[test]
    fn giving_up_frees_the_room() {
        let rooms = Rooms::default();
        let _go = rooms.prefill(3).unwrap();
        let mut kv = rooms.decode(3);
        rooms.abandon_prefill(3);
        assert_eq!(kv.try_recv(), Err(TryRecvError::Closed));
        assert_eq!(rooms.len(), 0);
        // A decode side alone that gives up leaves nothing behind; one whose prefill holds
        // the room leaves it to the prefill.
        let _kv = rooms.decode(4);
        rooms.abandon_decode(4);
        assert_eq!(rooms.len(), 0);
        let _go = rooms.prefill(6).unwrap();
        drop(rooms.decode(6));
        rooms.abandon_decode(6);
        assert_eq!(rooms.len(), 1);
        assert!(!rooms.complete(6, handoff(0)), "nobody waits for it now");
        assert_eq!(rooms.len(), 0);
    }
}
