use super::*;

#[test]
fn a_lease_unconfirmed_past_half_its_ttl_is_lost_for_good() {
    // Just confirmed, a long lease is not lost.
    let long = Lease::new(Duration::from_secs(600), Instant::now());
    assert!(!long.lost());
    // Unconfirmed past its margin (10 ms of a 20 ms lease), a lease is lost, and a late
    // confirmation does not bring it back: another node may hold the lock by then.
    let short = Lease::new(Duration::from_millis(20), Instant::now());
    std::thread::sleep(Duration::from_millis(30));
    assert!(short.lost());
    short.confirm(Instant::now());
    assert!(short.lost());
    // etcd saying the lease is gone loses it at once.
    long.lose();
    assert!(long.lost());
}

#[test]
fn a_late_answer_counts_from_when_its_request_was_sent() {
    // A keep-alive sent, then the holder frozen (or the answer held up) past the margin:
    // the answer proves the lease alive only from the moment the request left, so the lock
    // is lost, not refreshed by a stale answer.
    let lease = Lease::new(Duration::from_millis(200), Instant::now());
    let sent = Instant::now();
    std::thread::sleep(Duration::from_millis(150));
    lease.confirm(sent);
    assert!(lease.lost());
    // An older request's answer arriving after a newer one's does not move it back.
    let lease = Lease::new(Duration::from_secs(600), Instant::now());
    let older = Instant::now();
    lease.confirm(Instant::now());
    lease.confirm(older);
    assert!(!lease.lost());
}

#[test]
fn a_grant_answered_late_counts_from_when_it_was_asked() {
    // The grant was asked, and its answer took longer than the margin to come back: the
    // lease is counted from the request, so it is lost at once, not fresh for its margin.
    let sent = Instant::now();
    std::thread::sleep(Duration::from_millis(150));
    let lease = Lease::new(Duration::from_millis(200), sent);
    assert!(lease.lost());
}

#[test]
fn a_silent_member_is_passed_over_well_inside_the_margin() {
    for secs in [3, 5, 10, 60] {
        let ttl = Duration::from_secs(secs);
        let every = refresh_every(ttl);
        // A refresh interval, a round that times out and a round with the next member.
        assert!(3 * every <= ttl / 2, "ttl {secs}s: every {every:?}");
    }
    assert_eq!(
        refresh_every(Duration::from_secs(1)),
        Duration::from_millis(500)
    );
}

#[test]
fn the_holder_is_named_by_its_member_or_its_key() {
    assert_eq!(holder_name(b"/certrenewd/restart-lock/1", b"c2"), "c2");
    assert_eq!(
        holder_name(b"/certrenewd/restart-lock/694d", b""),
        "an unnamed holder of /certrenewd/restart-lock/694d"
    );
}
