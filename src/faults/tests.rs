//! The fault rules' parsing, selection and seeded decisions.

use super::*;

/// Issue 47, point 3: a rule file is bounded by what a mount can use, not by the input:
/// `/dev/zero` and a FIFO are refused without reading or blocking, a file over 1 MiB
/// before it is read, a rule past the 4,096th before it is parsed.
#[test]
fn rule_files_are_bounded_and_only_regular_files_are_read() {
    let no_texts: &[String] = &[];
    let e = Faults::load(no_texts, &["/dev/zero"], 0).err().unwrap();
    assert!(
        format!("{e:#}").contains("only regular files are read"),
        "{e:#}"
    );
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("rules.fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let e = Faults::load(no_texts, &[&fifo], 0).err().unwrap();
    assert!(format!("{e:#}").contains("a FIFO"), "{e:#}");
    let big = dir.path().join("big.rules");
    std::fs::write(&big, vec![b'#'; MAX_RULE_FILE as usize + 1]).unwrap();
    let e = Faults::load(no_texts, &[&big], 0).err().unwrap();
    assert!(
        format!("{e:#}").contains("more than the 1048576 bytes"),
        "{e:#}"
    );
    let many = dir.path().join("many.rules");
    std::fs::write(&many, "lookup errno=EIO nth=1\n".repeat(MAX_RULES + 1)).unwrap();
    let e = Faults::load(no_texts, &[&many], 0).err().unwrap();
    assert!(
        format!("{e:#}").contains(&format!("many.rules:{}: more than 4096", MAX_RULES + 1)),
        "{e:#}"
    );
    std::fs::write(&many, "lookup errno=EIO nth=1\n".repeat(MAX_RULES)).unwrap();
    assert_eq!(
        Faults::load(no_texts, &[&many], 0).unwrap().rules.len(),
        MAX_RULES
    );
}

fn req(op: Op, ino: u64, name: &[u8]) -> Request<'_> {
    Request {
        op,
        ino,
        parent: 7,
        name,
        set_atime: false,
        set_mtime: false,
    }
}

fn none() -> Option<String> {
    None
}

#[test]
fn parse_errors_name_the_problem() {
    for (text, needle) in [
        ("", "empty rule"),
        ("lookupp errno=EIO", "unknown operation 'lookupp'"),
        ("lookup", "no action"),
        ("lookup errno=EWHAT", "unknown errno 'EWHAT'"),
        ("lookup errno=EIO prob=2", "prob=2"),
        ("lookup errno=EIO nth=0", "nth=0"),
        ("lookup errno=EIO nth=1 every=2", "at most one"),
        ("lookup errno=EIO parsecs", "'parsecs': expected key=value"),
        ("lookup delay=5", "'5' is not a duration"),
        ("lookup delay=fast", "'fast' is not a duration"),
        (
            "lookup delay=99999999999h",
            "longer than the longest delay, 1h",
        ),
        ("lookup stall=61m", "longer than the longest delay"),
        (
            "lookup delay=uniform:1ms..2h",
            "longer than the longest delay",
        ),
        ("lookup delay=uniform:5ms..1ms", "low end"),
        ("lookup path=[ errno=EIO", "path=["),
        ("forget errno=EIO", "unknown operation 'forget'"),
        ("lookup colour=red errno=EIO", "unknown key 'colour'"),
    ] {
        let e = format!("{:#}", Rule::parse(text).err().expect(text));
        assert!(e.contains(needle), "{text}: {e}");
    }
}

#[test]
fn aliases_select_what_they_say() {
    let f = Faults::new(vec![Rule::parse("setattr-atime errno=EIO").unwrap()], 1);
    let mut r = req(Op::Setattr, 5, b"");
    assert_eq!(f.decide(&r, &mut none).errno, 0, "mtime-only setattr");
    r.set_atime = true;
    assert_eq!(f.decide(&r, &mut none).errno, libc::EIO);
    let f = Faults::new(vec![Rule::parse("list delay=1ms").unwrap()], 1);
    assert_eq!(
        f.decide(&req(Op::Readdirplus, 5, b""), &mut none).delay_ns,
        1_000_000
    );
    assert!(f.selects(Op::Readdir) && !f.selects(Op::Lookup));
}

#[test]
fn nth_and_every_count_matches() {
    let f = Faults::new(
        vec![
            Rule::parse("getattr nth=3 errno=EIO").unwrap(),
            Rule::parse("getattr every=2 delay=1ms").unwrap(),
        ],
        0,
    );
    let d: Vec<Decision> = (0..6)
        .map(|i| f.decide(&req(Op::Getattr, i, b""), &mut none))
        .collect();
    assert_eq!(d[2].errno, libc::EIO);
    assert_eq!(d.iter().filter(|d| d.errno != 0).count(), 1);
    // Rule 2 sees the requests rule 1 did not take: 1,2,4,5,6 -> its 2nd and 4th fire.
    let delayed: Vec<usize> = (0..6).filter(|&i| d[i].rule == 2).collect();
    assert_eq!(delayed, vec![1, 4]);
    let s = f.stats();
    assert_eq!((s[0].matches, s[0].hits), (6, 1));
    assert_eq!((s[1].matches, s[1].hits), (5, 2));
}

#[test]
fn probability_is_a_function_of_seed_and_request() {
    let run = |seed| {
        let f = Faults::new(
            vec![Rule::parse("lookup prob=0.3 errno=any").unwrap()],
            seed,
        );
        (0..10_000u64)
            .map(|i| f.decide(&req(Op::Lookup, i, b"x"), &mut none).errno)
            .collect::<Vec<_>>()
    };
    let a = run(1);
    assert_eq!(a, run(1));
    assert_ne!(a, run(2));
    let fired = a.iter().filter(|&&e| e != 0).count();
    assert!((2700..3300).contains(&fired), "{fired}");
    assert!(a
        .iter()
        .all(|e| *e == 0 || errnos_of(Op::Lookup).contains(e)));
    // The same request in reverse order gets the same decision.
    let f = Faults::new(vec![Rule::parse("lookup prob=0.3 errno=any").unwrap()], 1);
    for i in (0..10_000u64).rev() {
        assert_eq!(
            f.decide(&req(Op::Lookup, i, b"x"), &mut none).errno,
            a[i as usize]
        );
    }
    let never = Faults::new(vec![Rule::parse("lookup prob=0 errno=EIO").unwrap()], 1);
    assert!((0..1000).all(|i| never.decide(&req(Op::Lookup, i, b""), &mut none).errno == 0));
}

#[test]
fn delay_distributions_have_their_means() {
    let mean = |spec: &str| {
        let f = Faults::new(
            vec![Rule::parse(&format!("getattr delay={spec}")).unwrap()],
            3,
        );
        let n = 20_000u64;
        (0..n)
            .map(|i| f.decide(&req(Op::Getattr, i, b""), &mut none).delay_ns as f64)
            .sum::<f64>()
            / n as f64
    };
    let close = |a: f64, b: f64| (a - b).abs() < b * 0.05;
    assert!(close(mean("uniform:1ms..3ms"), 2e6));
    assert!(close(mean("exp:4ms"), 4e6));
    // lognormal mean = median * exp(sigma^2 / 2)
    assert!(close(mean("lognormal:2ms,0.5"), 2e6 * (0.125f64).exp()));
}

#[test]
fn globs_match_store_paths_and_resolve_lazily() {
    let f = Faults::new(
        vec![Rule::parse("lookup path=.chunks/*/00ff* errno=ENOENT").unwrap()],
        0,
    );
    let mut calls = 0;
    let p = |s: &'static str| move || -> Option<String> { Some(s.to_string()) };
    assert_eq!(
        f.decide(&req(Op::Lookup, 1, b""), &mut p(".chunks/00ff/00ffab"))
            .errno,
        libc::ENOENT
    );
    assert_eq!(
        f.decide(&req(Op::Lookup, 1, b""), &mut p(".chunks/0100/00ffab/x"))
            .errno,
        0,
        "* does not cross /"
    );
    let mut counting = || {
        calls += 1;
        None
    };
    f.decide(&req(Op::Getattr, 1, b""), &mut counting);
    assert_eq!(calls, 0, "not resolved for an operation no rule selects");
}

/// S3 rules: their own operations, actions and mask bits; never mixed with filesystem
/// ones; each process refuses the other's.
#[test]
fn s3_rules_select_s3_requests_with_s3_actions() {
    let r = Rule::parse("s3-list nth=2 status=503").unwrap();
    let req = |op, name: &'static [u8]| Request {
        op,
        ino: 0,
        parent: 0,
        name,
        set_atime: false,
        set_mtime: false,
    };
    assert!(r.selects_op(&req(Op::S3List, b".chunks/")));
    assert!(!r.selects_op(&req(Op::S3Delete, b"")));
    assert!(
        !r.selects_op(&req(Op::Lookup, b"")),
        "no filesystem request"
    );
    let all = Rule::parse("s3 cut").unwrap();
    for op in Op::ALL {
        assert_eq!(all.selects_op(&req(*op, b"")), op.is_s3(), "{op:?}");
    }
    let fs = Rule::parse("all errno=EIO").unwrap();
    assert!(
        !fs.selects_op(&req(Op::S3Get, b"")),
        "'all' is the filesystem's"
    );
    for (bad, says) in [
        ("s3-list errno=EIO", "status=CODE or cut"),
        ("s3-list,lookup delay=1ms", "not both"),
        ("lookup status=503", "for S3 requests"),
        ("lookup cut", "for S3 requests"),
        ("s3-list status=200", "400 to 599"),
        ("s3-list status=503 cut", "one of them"),
        ("s3-get nth=1", "no action"),
        ("s3-bogus delay=1ms", "unknown operation"),
    ] {
        let e = Rule::parse(bad)
            .err()
            .unwrap_or_else(|| panic!("{bad} parsed"));
        assert!(format!("{e:#}").contains(says), "{bad}: {e:#}");
    }
    let faults = Faults::new(vec![r], 7);
    assert!(faults.check_kind(true).is_ok());
    let e = faults.check_kind(false).unwrap_err();
    assert!(format!("{e}").contains("chunkscope s3-record"), "{e}");
    let d = |f: &Faults| f.decide(&req(Op::S3List, b".chunks/"), &mut || None);
    assert_eq!(d(&faults).status, 0, "the first listing is not the 2nd");
    let second = d(&faults);
    assert_eq!((second.status, second.rule, second.errno), (503, 1, 0));
    let fs = Faults::new(vec![Rule::parse("lookup errno=EIO").unwrap()], 0);
    assert!(format!("{}", fs.check_kind(true).unwrap_err()).contains("filesystem"));
}
