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
    chunkscope s3-record --s3-endpoint http://127.0.0.1:9000 --trace s3.trace\n  \
    chunkscope s3-record --s3-bucket store --mount /mnt/cs\n  \
    chunkscope s3-record --trace s3.trace --fault 's3-list nth=2 status=503'\n\n\
    The server is --s3-endpoint, else $AWS_ENDPOINT_URL_S3 or $AWS_ENDPOINT_URL (http only).\n\
    Point the client at the recorder (AWS_ENDPOINT_URL=http://127.0.0.1:9100 for chunkscope,\n\
    the endpoint of PBS's S3 client); requests are relayed as they were sent and signed, so\n\
    the recorder needs no credentials. With --mount the records go into the trace of the\n\
    chunkscope mount of the datastore's local cache, between the filesystem requests they\n\
    came between. It runs until\n\
    Ctrl-C or SIGTERM, then says what it relayed.")]
pub struct S3RecordArgs {
    /// Where clients connect, ADDRESS:PORT (port 0: any free one). The address is printed
    /// on standard output once the recorder listens.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9100")]
    listen: String,
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
}

/// A mount's trace, through its control socket (one request at a time).
struct MountSink(Mutex<Client>);

impl S3Sink for MountSink {
    fn record(&self, r: &S3Request) -> Result<()> {
        let mut client = self.0.lock().unwrap_or_else(|p| p.into_inner());
        client.request(&s3_request(r)).map(drop)
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
    let recorder = Recorder::bind(&args.listen, upstream.clone(), args.s3_bucket.clone())?
        .with_faults(faults)?;
    let addr = recorder.local_addr()?;
    let mut file_sink = None;
    let (writer, sink): (Option<TraceWriter>, Arc<dyn S3Sink>) = match (&args.trace, &args.mount) {
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
            let sink = Arc::new(FileSink(Mutex::new(Some(s))));
            file_sink = Some(sink.clone());
            (Some(w), sink)
        }
        (None, Some(mnt)) => {
            let socket = default_socket(mnt)?;
            let client = Client::connect(&socket)?;
            (None, Arc::new(MountSink(Mutex::new(client))))
        }
        (None, None) => bail!("give --trace FILE or --mount MOUNTPOINT"),
    };
    let counters = recorder.counters();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    signals.handle("signals", move || {
        let _ = stop_tx.send(());
    })?;
    let mut out = std::io::stdout();
    writeln!(out, "listening on http://{addr}")?;
    out.flush()?;
    tracing::info!(
        "relaying http://{addr} to {} ({})",
        upstream.authority,
        match (&args.trace, &args.mount) {
            (Some(t), _) => format!("trace {}", t.display()),
            (None, Some(m)) => format!("the trace of the mount at {}", m.display()),
            _ => String::new(),
        }
    );
    std::thread::Builder::new()
        .name("s3-accept".into())
        .spawn(move || {
            if let Err(e) = recorder.serve(sink) {
                tracing::error!("the recorder stopped: {e:#}");
            }
        })?;
    let _ = stop_rx.recv();
    use std::sync::atomic::Ordering::Relaxed;
    let (requests, unreachable, lost) = (
        counters.requests.load(Relaxed),
        counters.unreachable.load(Relaxed),
        counters.lost.load(Relaxed),
    );
    tracing::info!(
        "relayed {requests} requests ({unreachable} the server could not answer); {lost} records lost"
    );
    // Client threads may still hold the sink: closing it lets the writer finish.
    if let Some(f) = file_sink {
        f.0.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
    if let Some(w) = writer {
        let (stats, err) = w.finish_all();
        if let Some(e) = err {
            return Err(e).context("finishing the trace");
        }
        tracing::info!("trace: {} records", stats.written);
    }
    if lost > 0 {
        bail!("{lost} records could not be recorded (see the warnings above)");
    }
    Ok(Outcome::Ok)
}
