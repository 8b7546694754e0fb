//! `chunkscope s3-record`

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use clap::Args;

use super::Outcome;
use crate::overlay::control::{default_socket, s3_request, Client};
use crate::s3::recorder::{Recorder, S3Request, S3Sink, Upstream};
use crate::trace::{TraceMeta, TraceWriter};

/// Relay an S3 client's requests (a GC's, PBS's) to the bucket's server, recording each one:
/// operation, key, status, keys or bytes, duration.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    chunkscope s3-record --trace s3.trace -- chunkscope gc --s3-bucket pbs s3\n  \
    chunkscope s3-record --s3-endpoint http://127.0.0.1:9000 --trace s3.trace\n  \
    chunkscope s3-record --s3-bucket pbs --mount /mnt/cs\n  \
    chunkscope s3-record --trace s3.trace --fault 's3-list nth=2 status=503'\n\n\
    The server is --s3-endpoint, else $AWS_ENDPOINT_URL_S3 or $AWS_ENDPOINT_URL (http\n\
    only). Give the client as a COMMAND after -- (it gets AWS_ENDPOINT_URL set to the\n\
    recorder, and the recorder stops when it ends), or point it at the recorder (the\n\
    endpoint of PBS's S3 client) and stop the recorder with Ctrl-C or SIGTERM. Requests\n\
    are relayed as they were sent and signed: the recorder needs no credentials. With\n\
    --mount the records go into the trace of the chunkscope mount of the datastore's\n\
    local cache, between the filesystem requests they came between.")]
pub struct S3RecordArgs {
    /// Where clients connect, ADDRESS:PORT (port 0: any free one) [default: 127.0.0.1:9100,
    /// or a free port with a COMMAND]. Without a COMMAND the address is printed on standard
    /// output once the recorder listens.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Write the records to this trace file of the recorder's own.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "mount",
        required_unless_present = "mount"
    )]
    trace: Option<PathBuf>,
    /// Add the records to the trace of the running `chunkscope mount` at MOUNTPOINT (the
    /// datastore's local cache), through its control socket.
    #[arg(long, value_name = "MOUNTPOINT")]
    mount: Option<PathBuf>,
    /// The S3 server relayed to, http://HOST[:PORT] [default: $AWS_ENDPOINT_URL_S3,
    /// $AWS_ENDPOINT_URL].
    #[arg(long, value_name = "URL")]
    s3_endpoint: Option<String>,
    /// The bucket, taken off path-style keys in the records (without it a key is the whole
    /// path).
    #[arg(long, value_name = "NAME")]
    s3_bucket: Option<String>,
    /// A fault rule for the S3 requests, e.g. 's3-list nth=2 status=503' or 's3-delete
    /// prob=0.1 cut' (repeatable; tried in order, the first that fires decides). Syntax:
    /// OPS [path=GLOB] [after=DUR] [prob=P|nth=N|every=K] [delay=D|stall=D] [status=CODE|cut],
    /// OPS among s3-list, s3-delete, s3-put, s3-get, s3-head, s3-other, s3 (all); see
    /// src/faults/mod.rs.
    #[arg(long = "fault", value_name = "RULE")]
    faults: Vec<String>,
    /// Read fault rules from FILE, one per line (# comments), after the --fault ones.
    #[arg(long = "faults", value_name = "FILE")]
    fault_files: Vec<PathBuf>,
    /// Seed of the fault decisions: same seed, same requests, same faults.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Run COMMAND with AWS_ENDPOINT_URL (and AWS_ENDPOINT_URL_S3) set to the recorder, and
    /// stop when it ends, with its exit status.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// A mount's trace, through its control socket (one request at a time).
struct MountSink(Mutex<Client>);

impl S3Sink for MountSink {
    fn record(&self, r: &S3Request) -> Result<()> {
        let mut client = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let reply = client.request(&s3_request(r))?;
        if reply == "untraced" {
            // Not silently: a recording that kept nothing is no recording.
            bail!("the mount has no trace (start it with --trace FILE)");
        }
        Ok(())
    }
}

/// A trace file of the recorder's own; closed (the sink dropped, so the writer can finish)
/// when the recorder stops, while client threads may still hold this.
struct FileSink(Mutex<Option<crate::trace::TraceSink>>);

impl S3Sink for FileSink {
    fn record(&self, r: &S3Request) -> Result<()> {
        match &*self.0.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(sink) => S3Sink::record(sink, r),
            None => bail!("the recorder is stopping"),
        }
    }
}

pub fn run(args: S3RecordArgs) -> Result<Outcome> {
    let endpoint = args
        .s3_endpoint
        .clone()
        .or_else(|| std::env::var("AWS_ENDPOINT_URL_S3").ok())
        .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok())
        .filter(|e| !e.is_empty());
    let Some(endpoint) = endpoint else {
        bail!("no S3 server to relay to: give --s3-endpoint http://HOST:PORT (or set AWS_ENDPOINT_URL)");
    };
    let upstream = Upstream::from_endpoint(endpoint.trim_end_matches('/'))?;
    // Signals are handled on a thread of their own (made before any other thread).
    let signals = crate::fsutil::TerminationSignals::block();
    let faults = crate::faults::Faults::load(&args.faults, &args.fault_files, args.seed)?;
    let listen = match (&args.listen, args.command.is_empty()) {
        (Some(l), _) => l.clone(),
        (None, true) => "127.0.0.1:9100".to_string(),
        (None, false) => "127.0.0.1:0".to_string(),
    };
    let recorder =
        Recorder::bind(&listen, upstream.clone(), args.s3_bucket.clone())?.with_faults(faults)?;
    let addr = recorder.local_addr()?;
    let sinks = Sinks::open(&args, addr, &endpoint)?;
    let counters = recorder.counters();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<Stop>();
    let on_signal = stop_tx.clone();
    signals.handle("signals", move || {
        let _ = on_signal.send(Stop::Signal);
    })?;
    if args.command.is_empty() {
        let mut out = std::io::stdout();
        writeln!(out, "listening on http://{addr}")?;
        out.flush()?;
    }
    tracing::info!(
        "relaying http://{addr} to {} ({})",
        upstream.authority,
        match (&args.trace, &args.mount) {
            (Some(t), _) => format!("trace {}", t.display()),
            (None, Some(m)) => format!("the trace of the mount at {}", m.display()),
            _ => String::new(),
        }
    );
    let sink = sinks.sink.clone();
    std::thread::Builder::new()
        .name("s3-accept".into())
        .spawn(move || {
            if let Err(e) = recorder.serve(sink) {
                tracing::error!("the recorder stopped: {e:#}");
            }
        })?;
    let child = start_command(&args.command, addr, stop_tx)?;
    // Without a command, the first signal stops; with one, a signal is passed on to it (a
    // terminal's Ctrl-C reached it already) and the recorder stops when it has ended.
    let exited = loop {
        match stop_rx.recv() {
            Ok(Stop::Exited(status)) => break Some(status),
            Ok(Stop::Signal) => match &child {
                // SAFETY: a signal to the child this process started, not yet reaped (the
                // thread that reaps it sends `Exited` first).
                Some((_, pid)) => unsafe {
                    libc::kill(*pid as i32, libc::SIGTERM);
                },
                None => break None,
            },
            Err(_) => break None,
        }
    };
    use std::sync::atomic::Ordering::Relaxed;
    let (requests, unreachable, lost) = (
        counters.requests.load(Relaxed),
        counters.unreachable.load(Relaxed),
        counters.lost.load(Relaxed),
    );
    tracing::info!(
        "relayed {requests} requests ({unreachable} the server could not answer); {lost} records lost"
    );
    sinks.finish()?;
    if lost > 0 {
        bail!("{lost} records could not be recorded (see the warnings above)");
    }
    match (exited, child) {
        (Some(status), Some((program, _))) => {
            let status = status.with_context(|| format!("waiting for {program}"))?;
            Ok(match status.code() {
                Some(0) => Outcome::Ok,
                Some(code) => Outcome::Exit(code),
                // Ended by a signal: as a shell says it.
                None => Outcome::Exit(
                    128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0),
                ),
            })
        }
        _ => Ok(Outcome::Ok),
    }
}

/// Where the records go: a trace file of the recorder's own (its writer, and the sink to
/// close before it can finish), or a mount's trace.
struct Sinks {
    writer: Option<TraceWriter>,
    file: Option<Arc<FileSink>>,
    sink: Arc<dyn S3Sink>,
}

impl Sinks {
    fn open(args: &S3RecordArgs, addr: std::net::SocketAddr, endpoint: &str) -> Result<Sinks> {
        match (&args.trace, &args.mount) {
            (Some(path), _) => {
                let mut meta = TraceMeta {
                    store: format!(
                        "s3://{} at {endpoint}",
                        args.s3_bucket.as_deref().unwrap_or("?")
                    ),
                    ..Default::default()
                };
                meta.options
                    .insert("s3_recorder".into(), addr.to_string().into());
                let (w, s) = TraceWriter::start(path, meta)
                    .with_context(|| format!("--trace {}", path.display()))?;
                let file = Arc::new(FileSink(Mutex::new(Some(s))));
                Ok(Sinks {
                    writer: Some(w),
                    sink: file.clone(),
                    file: Some(file),
                })
            }
            (None, Some(mnt)) => {
                let client = Client::connect(&default_socket(mnt)?)?;
                Ok(Sinks {
                    writer: None,
                    file: None,
                    sink: Arc::new(MountSink(Mutex::new(client))),
                })
            }
            (None, None) => bail!("give --trace FILE or --mount MOUNTPOINT"),
        }
    }

    /// Finishes the trace file (client threads may still hold the sink: closing it lets the
    /// writer finish).
    fn finish(self) -> Result<()> {
        if let Some(f) = self.file {
            f.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        }
        if let Some(w) = self.writer {
            let (stats, err) = w.finish_all();
            if let Some(e) = err {
                return Err(e).context("finishing the trace");
            }
            tracing::info!("trace: {} records", stats.written);
        }
        Ok(())
    }
}

/// Starts `command` (if any) against the recorder at `addr`; its end is sent to `stop`.
/// Returns its program and pid.
fn start_command(
    command: &[String],
    addr: std::net::SocketAddr,
    stop: std::sync::mpsc::Sender<Stop>,
) -> Result<Option<(String, u32)>> {
    let Some((program, rest)) = command.split_first() else {
        return Ok(None);
    };
    let url = format!("http://{addr}");
    let mut cmd = std::process::Command::new(program);
    cmd.args(rest)
        .env("AWS_ENDPOINT_URL", &url)
        .env("AWS_ENDPOINT_URL_S3", &url);
    crate::fsutil::unblock_termination_signals_in(&mut cmd);
    let mut child = cmd.spawn().with_context(|| format!("starting {program}"))?;
    let pid = child.id();
    std::thread::Builder::new()
        .name("command".into())
        .spawn(move || {
            let status = child.wait();
            let _ = stop.send(Stop::Exited(status));
        })?;
    Ok(Some((program.clone(), pid)))
}

/// Why the recorder stops.
enum Stop {
    /// SIGINT or SIGTERM.
    Signal,
    /// The COMMAND it ran ended.
    Exited(std::io::Result<std::process::ExitStatus>),
}
