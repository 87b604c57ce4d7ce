//! Which sections each flag of `cargo xtask bench` runs, and what they need built.

use super::*;

#[test]
fn each_flag_runs_its_section_and_a_whole_run_all_but_dpop() {
    let flags = |s| chosen(s).iter().map(|x| x.alone).collect::<Vec<_>>();
    use Sections::*;
    assert_eq!(
        flags(All),
        [
            Some(Traffic),
            None,
            Some(Edge),
            Some(Feed),
            Some(Stores),
            Some(Directory),
            Some(Failover)
        ]
    );
    for one in [
        Traffic, Edge, Feed, Stores, Directory, Failover, TokenDpop, Exchange, Admin,
    ] {
        assert_eq!(flags(one), [Some(one)]);
    }
    assert_eq!(flags(Dpop), [Some(Dpop), Some(TokenDpop)]);
    let needs = |s| chosen(s).iter().fold(Needs::NOTHING, |n, x| n.and(x.needs));
    assert!(!needs(Failover).envoy && needs(Failover).issuer);
    assert!(needs(Dpop).issuer && needs(Dpop).modules);
    assert!(needs(TokenDpop).issuer && !needs(TokenDpop).envoy);
    assert!(needs(Admin).issuer && !needs(Admin).envoy && !needs(Admin).criterion);
    assert!(needs(All).criterion && !needs(Traffic).criterion);
    assert!(needs(Exchange).envoy && needs(Exchange).issuer && !needs(Exchange).modules);
}
