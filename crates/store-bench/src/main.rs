//! Storage-engine benchmarks: numbers, not tests. See `benches/README.md`.
//!
//! ```text
//! cargo run --release -p ferromq-store-bench -- [--quick] [--json PATH]
//! ```
//!
//! Everything runs on local files in a fresh directory under the temp dir (or `--dir`), which
//! is removed at the end. Prints one plain-text table and writes a JSON file with the
//! parameters, the environment and the results so that runs can be compared.

use std::error::Error;
use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ferromq_store::message::record_len;
use ferromq_store::{BatchItem, FlushDiskType, GetStatus, MessageMeta, MessageStore, StoreConfig};
use memmap2::MmapMut;

type BoxResult<T> = std::result::Result<T, Box<dyn Error>>;

const TOPIC: &str = "BenchTopic";
const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;
/// A CommitLog file ends with at least this many bytes of end-of-file blank.
const END_BLANK: u64 = 8;
const HEX: &[u8; 16] = b"0123456789ABCDEF";

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Opts {
    quick: bool,
    json: PathBuf,
    parent_dir: PathBuf,
    sizes: Vec<usize>,
    file_size: usize,
    append_bytes: u64,
    batch_bytes: u64,
    batch_size: usize,
    memcpy_bytes: u64,
    fsync_record: usize,
    fsync_secs: f64,
    sync_body: usize,
    sync_threads: Vec<usize>,
    sync_secs: f64,
    sync_queues: i32,
    read_max_secs: f64,
    read_batch: usize,
    read_max_bytes: usize,
    slot_num: usize,
    index_num: usize,
    /// Which groups to run: memcpy, append, batch, read, fsync, sync (read needs append).
    only: Vec<String>,
}

impl Opts {
    fn full() -> Self {
        Opts {
            quick: false,
            json: PathBuf::from("bench-results/store_bench_rust.json"),
            parent_dir: std::env::temp_dir(),
            sizes: vec![100, 1024, 4096],
            file_size: 256 * MIB as usize,
            append_bytes: 1536 * MIB,
            batch_bytes: 1024 * MIB,
            batch_size: 64,
            memcpy_bytes: 4096 * MIB,
            fsync_record: 1024,
            fsync_secs: 3.0,
            sync_body: 1024,
            sync_threads: vec![1, 8, 64],
            sync_secs: 3.0,
            sync_queues: 8,
            read_max_secs: 10.0,
            read_batch: 32,
            read_max_bytes: 256 * KIB as usize,
            slot_num: 5_000_000,
            index_num: 20_000_000,
            only: GROUPS.iter().map(|g| g.to_string()).collect(),
        }
    }

    fn runs(&self, group: &str) -> bool {
        self.only.iter().any(|g| g == group)
    }

    fn quick() -> Self {
        Opts {
            quick: true,
            file_size: 16 * MIB as usize,
            append_bytes: 64 * MIB,
            batch_bytes: 48 * MIB,
            memcpy_bytes: 256 * MIB,
            fsync_secs: 0.5,
            sync_secs: 0.5,
            read_max_secs: 2.0,
            slot_num: 100_000,
            index_num: 1_000_000,
            ..Opts::full()
        }
    }
}

const GROUPS: [&str; 6] = ["memcpy", "append", "batch", "read", "fsync", "sync"];

const USAGE: &str = "\
usage: store-bench [--quick] [--json PATH] [--dir DIR] [--sizes 100,1024,4096]
                   [--append-mib N] [--batch-mib N] [--sync-seconds S] [--sync-threads 1,8,64]
                   [--only memcpy,append,batch,read,fsync,sync]
                   [--file-mib N] [--index-slots N] [--index-entries N]

  --quick            short smoke run (16 MiB CommitLog files, 64 MiB per append case, 0.5 s waits)
  --json PATH        where to write the results (default bench-results/store_bench_rust.json)
  --dir DIR          parent of the scratch directory (default: the system temp dir)
  --sizes LIST       message body sizes in bytes
  --append-mib N     record bytes written per single-message ASYNC append case
  --batch-mib N      record bytes written per batch ASYNC append case
  --sync-seconds S   duration of each SYNC_FLUSH and fdatasync case
  --sync-threads L   appender thread counts for SYNC_FLUSH
  --only LIST        run only these groups (read runs on the append stores)
  --file-mib N       mapped_file_size_commitlog in MiB (default 256; --quick 16)
  --index-slots N    max_hash_slot_num of the stores (default 5000000; --quick 100000)
  --index-entries N  max_index_num of the stores (default 20000000; --quick 1000000)";

fn parse_list<T: std::str::FromStr>(s: &str) -> BoxResult<Vec<T>> {
    s.split(',')
        .map(|x| {
            x.trim()
                .parse::<T>()
                .map_err(|_| format!("bad list item {x:?}").into())
        })
        .collect()
}

fn parse_args() -> BoxResult<Opts> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Expand `--flag=value` into two items.
    let mut items = Vec::new();
    for a in args {
        match a.split_once('=') {
            Some((k, v)) if k.starts_with("--") => {
                items.push(k.to_string());
                items.push(v.to_string());
            }
            _ => items.push(a),
        }
    }
    if items.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        std::process::exit(0);
    }
    let mut o = if items.iter().any(|a| a == "--quick") {
        Opts::quick()
    } else {
        Opts::full()
    };
    let mut it = items.into_iter();
    while let Some(flag) = it.next() {
        if flag == "--quick" {
            continue;
        }
        let mut value = || -> BoxResult<String> {
            it.next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}").into())
        };
        match flag.as_str() {
            "--json" => o.json = PathBuf::from(value()?),
            "--dir" => o.parent_dir = PathBuf::from(value()?),
            "--sizes" => o.sizes = parse_list(&value()?)?,
            "--append-mib" => o.append_bytes = value()?.parse::<u64>()? * MIB,
            "--batch-mib" => o.batch_bytes = value()?.parse::<u64>()? * MIB,
            "--sync-seconds" => {
                let s: f64 = value()?.parse()?;
                o.sync_secs = s;
                o.fsync_secs = s;
            }
            "--sync-threads" => o.sync_threads = parse_list(&value()?)?,
            "--index-slots" => o.slot_num = value()?.parse()?,
            "--file-mib" => o.file_size = value()?.parse::<usize>()? * MIB as usize,
            "--index-entries" => o.index_num = value()?.parse()?,
            "--only" => {
                o.only = parse_list(&value()?)?;
                if let Some(bad) = o.only.iter().find(|g| !GROUPS.contains(&g.as_str())) {
                    return Err(format!("unknown group {bad:?} (have {GROUPS:?})").into());
                }
            }
            _ => return Err(format!("unknown argument {flag:?}\n{USAGE}").into()),
        }
    }
    Ok(o)
}

// ---------------------------------------------------------------------------------------------
// A tiny JSON writer (the crate has no serde)
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Json {
    Null,
    Bool(bool),
    Int(i64),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl From<&str> for Json {
    fn from(s: &str) -> Self {
        Json::Str(s.to_string())
    }
}
impl From<String> for Json {
    fn from(s: String) -> Self {
        Json::Str(s)
    }
}
impl From<bool> for Json {
    fn from(b: bool) -> Self {
        Json::Bool(b)
    }
}
impl From<f64> for Json {
    fn from(x: f64) -> Self {
        Json::Num(x)
    }
}
impl From<u64> for Json {
    fn from(x: u64) -> Self {
        Json::Int(x as i64)
    }
}
impl From<usize> for Json {
    fn from(x: usize) -> Self {
        Json::Int(x as i64)
    }
}
impl From<i32> for Json {
    fn from(x: i32) -> Self {
        Json::Int(x as i64)
    }
}
impl<T: Into<Json>> From<Option<T>> for Json {
    fn from(x: Option<T>) -> Self {
        x.map_or(Json::Null, Into::into)
    }
}
impl<T: Into<Json> + Clone> From<&[T]> for Json {
    fn from(x: &[T]) -> Self {
        Json::Arr(x.iter().cloned().map(Into::into).collect())
    }
}

/// `obj![("key", value), ...]`
macro_rules! obj {
    ($(($k:expr, $v:expr)),* $(,)?) => {
        Json::Obj(vec![$(($k.to_string(), Json::from($v))),*])
    };
}

impl Json {
    fn write(&self, out: &mut String, indent: usize) {
        let pad = |out: &mut String, n: usize| out.extend(std::iter::repeat_n(' ', n));
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Json::Num(x) if x.is_finite() => {
                // Enough digits for rates and ratios; keeps the file readable.
                let _ = write!(out, "{}", (x * 1e6).round() / 1e6);
            }
            Json::Num(_) => out.push_str("null"),
            Json::Str(s) => {
                out.push('"');
                for c in s.chars() {
                    match c {
                        '"' => out.push_str("\\\""),
                        '\\' => out.push_str("\\\\"),
                        '\n' => out.push_str("\\n"),
                        '\r' => out.push_str("\\r"),
                        '\t' => out.push_str("\\t"),
                        c if (c as u32) < 0x20 => {
                            let _ = write!(out, "\\u{:04x}", c as u32);
                        }
                        c => out.push(c),
                    }
                }
                out.push('"');
            }
            Json::Arr(v) if v.iter().all(|x| !matches!(x, Json::Obj(_) | Json::Arr(_))) => {
                out.push('[');
                for (i, x) in v.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    x.write(out, indent);
                }
                out.push(']');
            }
            Json::Arr(v) => {
                out.push_str("[\n");
                for (i, x) in v.iter().enumerate() {
                    pad(out, indent + 2);
                    x.write(out, indent + 2);
                    out.push_str(if i + 1 < v.len() { ",\n" } else { "\n" });
                }
                pad(out, indent);
                out.push(']');
            }
            Json::Obj(m) => {
                if m.is_empty() {
                    out.push_str("{}");
                    return;
                }
                out.push_str("{\n");
                for (i, (k, v)) in m.iter().enumerate() {
                    pad(out, indent + 2);
                    Json::Str(k.clone()).write(out, indent + 2);
                    out.push_str(": ");
                    v.write(out, indent + 2);
                    out.push_str(if i + 1 < m.len() { ",\n" } else { "\n" });
                }
                pad(out, indent);
                out.push('}');
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Environment
// ---------------------------------------------------------------------------------------------

fn command_output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    // `python --version` wrote to stderr before 3.4; take whichever has text.
    let text = if out.stdout.is_empty() {
        out.stderr
    } else {
        out.stdout
    };
    Some(String::from_utf8_lossy(&text).trim().to_string())
}

fn read_trim(path: &str) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn cpu_model() -> Option<String> {
    let info = fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

fn mem_total_bytes() -> Option<u64> {
    let info = fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Block-device counters from `/proc/diskstats`: whole-device, so they include any other
/// process's I/O on the same disk during a measurement.
#[derive(Debug, Clone, Copy, Default)]
struct DiskStats {
    writes: u64,
    write_bytes: u64,
    flushes: u64,
}

impl DiskStats {
    fn read(dev: Option<&str>) -> Option<DiskStats> {
        let name = dev?.rsplit('/').next()?;
        let text = fs::read_to_string("/proc/diskstats").ok()?;
        let f: Vec<u64> = text
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.len() > 3 && f[2] == name)?
            .iter()
            .skip(3)
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        Some(DiskStats {
            writes: *f.get(4)?,
            write_bytes: f.get(6)? * 512,
            flushes: f.get(15).copied().unwrap_or(0),
        })
    }

    /// JSON of the counters between `self` (before) and `after`, per message too.
    fn delta_json(self, after: Option<DiskStats>, msgs: u64) -> Vec<(String, Json)> {
        let Some(a) = after else {
            return Vec::new();
        };
        let (w, b, fl) = (
            a.writes.saturating_sub(self.writes),
            a.write_bytes.saturating_sub(self.write_bytes),
            a.flushes.saturating_sub(self.flushes),
        );
        vec![
            ("device_writes".into(), Json::from(w)),
            ("device_write_bytes".into(), Json::from(b)),
            ("device_flushes".into(), Json::from(fl)),
            (
                "device_write_bytes_per_msg".into(),
                Json::from(b as f64 / msgs.max(1) as f64),
            ),
        ]
    }
}

fn scratch_device(dir: &Path) -> Option<String> {
    filesystem_of(dir).map(|f| f.0)
}

fn loadavg() -> Option<String> {
    read_trim("/proc/loadavg")
}

/// (device, mount point, fs type, options) of the mount holding `path`.
fn filesystem_of(path: &Path) -> Option<(String, String, String, String)> {
    let path = fs::canonicalize(path).ok()?;
    let mounts = fs::read_to_string("/proc/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4).then(|| (f[0], f[1], f[2], f[3]))
        })
        .filter(|(_, mp, _, _)| path.starts_with(mp))
        .max_by_key(|(_, mp, _, _)| mp.len())
        .map(|(d, mp, t, o)| (d.into(), mp.into(), t.into(), o.into()))
}

fn git_commit() -> (Option<String>, Option<bool>) {
    let commit = command_output("git", &["rev-parse", "HEAD"]);
    let dirty = command_output("git", &["status", "--porcelain", "--untracked-files=no"])
        .map(|s| !s.is_empty());
    (commit, dirty)
}

fn environment(dir: &Path) -> Json {
    let (commit, dirty) = git_commit();
    let fs_info = filesystem_of(dir);
    let python = command_output("python3", &["--version"]);
    obj![
        (
            "cpu_count",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        ),
        ("cpu_model", cpu_model()),
        ("mem_total_bytes", mem_total_bytes()),
        ("kernel", read_trim("/proc/sys/kernel/osrelease")),
        ("loadavg_at_start", loadavg()),
        ("os", std::env::consts::OS),
        ("arch", std::env::consts::ARCH),
        ("rustc", command_output("rustc", &["--version"])),
        ("python", python),
        ("crate_version", env!("CARGO_PKG_VERSION")),
        ("debug_build", cfg!(debug_assertions)),
        ("git_commit", commit),
        ("git_dirty", dirty),
        ("scratch_dir", dir.display().to_string()),
        ("fs_device", fs_info.as_ref().map(|f| f.0.clone())),
        ("fs_mount", fs_info.as_ref().map(|f| f.1.clone())),
        ("fs_type", fs_info.as_ref().map(|f| f.2.clone())),
        ("fs_options", fs_info.as_ref().map(|f| f.3.clone())),
        (
            "vm_dirty_ratio",
            read_trim("/proc/sys/vm/dirty_ratio").and_then(|s| s.parse::<u64>().ok())
        ),
        (
            "vm_dirty_background_ratio",
            read_trim("/proc/sys/vm/dirty_background_ratio").and_then(|s| s.parse::<u64>().ok())
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// Scratch directory and message material
// ---------------------------------------------------------------------------------------------

/// A fresh directory removed on drop (also on panic unwinding).
struct Scratch {
    path: PathBuf,
}

impl Scratch {
    fn new(parent: &Path) -> BoxResult<Self> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = parent.join(format!(
            "ferromq-store-bench-{}-{nanos}",
            std::process::id()
        ));
        fs::create_dir_all(&path)?;
        Ok(Scratch { path })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_dir_all(&self.path) {
            eprintln!("could not remove {}: {e}", self.path.display());
        }
    }
}

fn remove_dir(path: &Path) {
    if let Err(e) = fs::remove_dir_all(path) {
        eprintln!("could not remove {}: {e}", path.display());
    }
}

/// Writes back all dirty pages, so a measurement does not pay for the previous one's I/O.
fn quiesce() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    std::thread::sleep(Duration::from_millis(200));
}

fn make_body(len: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + (i % 26) as u8).collect()
}

/// A properties string `TAGS=TagA, KEYS=k123, UNIQ_KEY=<32 hex>` whose UNIQ_KEY changes per
/// message in place (the last 16 hex digits are a counter), so every message is unique but
/// building it costs a few nanoseconds.
struct Props {
    buf: String,
    keep: usize,
}

impl Props {
    fn new(stream: u64) -> Self {
        let mut buf = String::from("TAGS\u{1}TagA\u{2}KEYS\u{1}k123\u{2}UNIQ_KEY\u{1}");
        // 16 hex digits that stand for host, pid and stream, then a 16-digit counter.
        let _ = write!(
            buf,
            "7F000001{:04X}{:04X}",
            std::process::id() & 0xFFFF,
            stream
        );
        let keep = buf.len();
        let mut p = Props { buf, keep };
        p.set(0);
        p
    }

    fn set(&mut self, n: u64) -> &str {
        self.buf.truncate(self.keep);
        for i in (0..16).rev() {
            self.buf.push(HEX[((n >> (i * 4)) & 0xF) as usize] as char);
        }
        &self.buf
    }

    fn len(&self) -> usize {
        self.keep + 16
    }
}

fn meta(queue_id: i32) -> MessageMeta<'static> {
    MessageMeta {
        topic: TOPIC,
        queue_id,
        flag: 0,
        sys_flag: 0,
        born_timestamp: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64),
        born_host: SocketAddr::from(([10, 0, 0, 1], 50000)),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
    }
}

fn stored_record_len(body_len: usize) -> usize {
    record_len(0, body_len, TOPIC.len(), Props::new(0).len())
}

fn store_config(o: &Opts, root: &Path, flush: FlushDiskType) -> StoreConfig {
    let mut c = StoreConfig::new(root);
    c.mapped_file_size_commitlog = o.file_size;
    c.flush_disk_type = flush;
    c.max_hash_slot_num = o.slot_num;
    c.max_index_num = o.index_num;
    c
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn percentile(sorted: &[u32], p: f64) -> Option<u32> {
    if sorted.is_empty() {
        return None;
    }
    let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
    Some(sorted[idx])
}

// ---------------------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------------------

/// One measured case: a table row and a JSON object.
struct Row {
    bench: String,
    body: Option<usize>,
    record: Option<usize>,
    threads: usize,
    batch: usize,
    count: u64,
    seconds: f64,
    /// Messages (or operations) per second.
    rate: f64,
    /// Record bytes per second / 1e6.
    mb_per_sec: Option<f64>,
    /// Human summary of the comparison against a baseline or target.
    vs: String,
    extra: Vec<(String, Json)>,
}

impl Row {
    fn json(&self) -> Json {
        let mut m = vec![
            ("bench".to_string(), Json::from(self.bench.as_str())),
            ("body_bytes".to_string(), Json::from(self.body)),
            ("record_bytes".to_string(), Json::from(self.record)),
            ("threads".to_string(), Json::from(self.threads)),
            ("batch".to_string(), Json::from(self.batch)),
            ("count".to_string(), Json::from(self.count)),
            ("seconds".to_string(), Json::from(self.seconds)),
            ("per_sec".to_string(), Json::from(self.rate)),
            ("mb_per_sec".to_string(), Json::from(self.mb_per_sec)),
            ("notes".to_string(), Json::from(self.vs.as_str())),
        ];
        m.extend(self.extra.iter().cloned());
        Json::Obj(m)
    }
}

fn fmt_rate(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

fn table(rows: &[Row]) -> String {
    let header = [
        "benchmark",
        "body",
        "thr",
        "batch",
        "count",
        "secs",
        "msg/s",
        "MB/s",
        "notes",
    ];
    let cells: Vec<[String; 9]> = rows
        .iter()
        .map(|r| {
            [
                r.bench.clone(),
                r.body.map_or("-".into(), |b| b.to_string()),
                r.threads.to_string(),
                r.batch.to_string(),
                r.count.to_string(),
                format!("{:.2}", r.seconds),
                fmt_rate(r.rate),
                r.mb_per_sec.map_or("-".into(), |m| format!("{m:.0}")),
                r.vs.clone(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for c in &cells {
        for (w, s) in widths.iter_mut().zip(c.iter()) {
            *w = (*w).max(s.len());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, c: &[String]| {
        for (i, s) in c.iter().enumerate() {
            // Text columns left-aligned, numbers right-aligned.
            if i == 0 || i == 8 {
                let _ = write!(out, "{:<w$}", s, w = widths[i]);
            } else {
                let _ = write!(out, "{:>w$}", s, w = widths[i]);
            }
            out.push_str(if i + 1 < c.len() { "  " } else { "\n" });
        }
    };
    line(&mut out, &header.map(String::from));
    let total: usize = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
    out.push_str(&"-".repeat(total));
    out.push('\n');
    for c in &cells {
        line(&mut out, c);
    }
    // Trailing spaces of the last, left-aligned column are noise.
    out.lines()
        .map(|l| l.trim_end().to_string() + "\n")
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Baselines
// ---------------------------------------------------------------------------------------------

/// Copies `rec_len`-byte records back to back into a warm (pre-touched, already written once)
/// shared mapping of a `file_size` file, wrapping around, `total` bytes in all.
fn bench_memcpy(dir: &Path, file_size: usize, rec_len: usize, total: u64) -> BoxResult<Row> {
    let path = dir.join(format!("memcpy-{rec_len}.bin"));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    file.set_len(file_size as u64)?;
    // SAFETY: a private scratch file nobody else maps or truncates.
    let mut map = unsafe { MmapMut::map_mut(&file)? };
    let rec: Vec<u8> = (0..rec_len).map(|i| (i % 251) as u8).collect();
    // Warm up: fault every page in and run one untimed pass of the copy loop.
    map.fill(0);
    let copy_pass = |map: &mut MmapMut, n: u64, mut pos: usize| -> usize {
        for _ in 0..n {
            if pos + rec_len > file_size {
                pos = 0;
            }
            map[pos..pos + rec_len].copy_from_slice(std::hint::black_box(&rec));
            pos += rec_len;
        }
        pos
    };
    copy_pass(&mut map, (file_size / rec_len) as u64, 0);
    let n = total / rec_len as u64;
    let start = Instant::now();
    copy_pass(&mut map, n, 0);
    std::hint::black_box(&map[..]);
    let elapsed = secs(start.elapsed());
    drop(map);
    drop(file);
    fs::remove_file(&path)?;
    let bytes = n * rec_len as u64;
    Ok(Row {
        bench: "baseline memcpy->warm mmap".into(),
        body: None,
        record: Some(rec_len),
        threads: 1,
        batch: 1,
        count: n,
        seconds: elapsed,
        rate: n as f64 / elapsed,
        mb_per_sec: Some(bytes as f64 / elapsed / 1e6),
        vs: format!("{:.2} GB/s", bytes as f64 / elapsed / 1e9),
        extra: vec![
            (
                "gb_per_sec".into(),
                Json::from(bytes as f64 / elapsed / 1e9),
            ),
            ("mapping_bytes".into(), Json::from(file_size)),
        ],
    })
}

/// Like the store's CommitLog: a sequence of new `file_size` files, each created with
/// `posix_fallocate` and pre-touched with `MADV_POPULATE_WRITE` before its copy starts (not
/// timed); `rec_len`-byte records are copied into each file up to its end, `total` bytes in
/// all. Only the copying is timed: the rate a store could reach if its files were always ready.
fn bench_memcpy_fresh(dir: &Path, file_size: usize, rec_len: usize, total: u64) -> BoxResult<Row> {
    let rec: Vec<u8> = (0..rec_len).map(|i| (i % 251) as u8).collect();
    let per_file = ((file_size - END_BLANK as usize) / rec_len) as u64;
    let files = (total / rec_len as u64).div_ceil(per_file).max(1);
    let mut copy_time = Duration::ZERO;
    let mut pretouch_ms = Vec::new();
    let mut n = 0u64;
    for k in 0..files {
        let path = dir.join(format!("fresh-{rec_len}-{k}.bin"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        file.set_len(file_size as u64)?;
        // SAFETY: plain libc call on a valid descriptor.
        let rc = unsafe {
            libc::posix_fallocate(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
                file_size as libc::off_t,
            )
        };
        if rc != 0 {
            eprintln!("posix_fallocate: error {rc} (continuing)");
        }
        // SAFETY: a private scratch file nobody else maps or truncates.
        let mut map = unsafe { MmapMut::map_mut(&file)? };
        let touch = Instant::now();
        if map.advise(memmap2::Advice::PopulateWrite).is_err() {
            for off in (0..file_size).step_by(4096) {
                map[off] = 0;
            }
        }
        pretouch_ms.push(secs(touch.elapsed()) * 1e3);
        let start = Instant::now();
        let mut pos = 0;
        for _ in 0..per_file {
            map[pos..pos + rec_len].copy_from_slice(std::hint::black_box(&rec));
            pos += rec_len;
        }
        std::hint::black_box(&map[..]);
        copy_time += start.elapsed();
        n += per_file;
        drop(map);
        drop(file);
        fs::remove_file(&path)?;
    }
    let elapsed = secs(copy_time);
    let bytes = n * rec_len as u64;
    Ok(Row {
        bench: "baseline memcpy->fresh mmap".into(),
        body: None,
        record: Some(rec_len),
        threads: 1,
        batch: 1,
        count: n,
        seconds: elapsed,
        rate: n as f64 / elapsed,
        mb_per_sec: Some(bytes as f64 / elapsed / 1e6),
        vs: format!(
            "{:.2} GB/s; {files} files, pre-touch {:.0} ms each",
            bytes as f64 / elapsed / 1e9,
            pretouch_ms.iter().sum::<f64>() / pretouch_ms.len().max(1) as f64
        ),
        extra: vec![
            (
                "gb_per_sec".into(),
                Json::from(bytes as f64 / elapsed / 1e9),
            ),
            ("files".into(), Json::from(files)),
            ("pretouch_ms_per_file".into(), Json::from(&pretouch_ms[..])),
        ],
    })
}

/// `write()` + `fdatasync()` of `rec_len`-byte records appended to a plain file, for `dur` s.
fn bench_fdatasync(dir: &Path, rec_len: usize, dur: f64) -> BoxResult<Row> {
    let path = dir.join("fdatasync.bin");
    let mut file = File::create(&path)?;
    let rec = make_body(rec_len);
    let mut lat_us: Vec<u32> = Vec::with_capacity(1 << 16);
    let deadline = Duration::from_secs_f64(dur);
    let dev = scratch_device(dir);
    let disk_before = DiskStats::read(dev.as_deref());
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < deadline {
        let t0 = Instant::now();
        file.write_all(&rec)?;
        file.sync_data()?;
        lat_us.push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
        n += 1;
    }
    let elapsed = secs(start.elapsed());
    let disk = disk_before
        .map(|b| b.delta_json(DiskStats::read(dev.as_deref()), n))
        .unwrap_or_default();
    drop(file);
    fs::remove_file(&path)?;
    lat_us.sort_unstable();
    Ok(Row {
        bench: "baseline write+fdatasync".into(),
        body: None,
        record: Some(rec_len),
        threads: 1,
        batch: 1,
        count: n,
        seconds: elapsed,
        rate: n as f64 / elapsed,
        mb_per_sec: Some((n * rec_len as u64) as f64 / elapsed / 1e6),
        vs: format!(
            "p50 {} us, p99 {} us",
            percentile(&lat_us, 0.5).unwrap_or(0),
            percentile(&lat_us, 0.99).unwrap_or(0)
        ),
        extra: vec![
            (
                "p50_us".into(),
                Json::from(percentile(&lat_us, 0.5).map(|x| x as u64)),
            ),
            (
                "p99_us".into(),
                Json::from(percentile(&lat_us, 0.99).map(|x| x as u64)),
            ),
            (
                "max_us".into(),
                Json::from(lat_us.last().map(|x| *x as u64)),
            ),
        ]
        .into_iter()
        .chain(disk)
        .collect(),
    })
}

// ---------------------------------------------------------------------------------------------
// Store: ASYNC_FLUSH append (single and batch), reads
// ---------------------------------------------------------------------------------------------

struct AppendOut {
    row: Row,
    read: Option<Row>,
}

/// Appends `target_bytes` of records (single puts when `batch == 1`, else `put_messages`
/// batches) to a fresh ASYNC_FLUSH store. Then, for single puts, scans the queue with
/// `get_messages`. Per CommitLog file it records the append rate, and it times the puts that
/// roll over to a new file.
fn bench_append(
    o: &Opts,
    dir: &Path,
    body_len: usize,
    batch: usize,
    target_bytes: u64,
    memcpy_rate: Option<f64>,
) -> BoxResult<AppendOut> {
    let root = dir.join(format!("async-{body_len}-b{batch}"));
    let open_start = Instant::now();
    let store = MessageStore::open(store_config(o, &root, FlushDiskType::Async))?;
    let open_secs = secs(open_start.elapsed());
    let body = make_body(body_len);
    let meta = meta(0);
    let rec_len = stored_record_len(body_len) as u64;
    let file_size = o.file_size as u64;
    let step = rec_len * batch as u64;
    let puts = target_bytes.div_ceil(step).max(1);
    let mut single = Props::new(0);
    let mut batch_props: Vec<Props> = (0..batch as u64).map(|i| Props::new(i + 1)).collect();

    let mut seg_rates: Vec<f64> = Vec::new();
    let mut roll_ms: Vec<f64> = Vec::new();
    let mut seg_start = Instant::now();
    let mut seg_msgs = 0u64;
    let mut end: u64 = 0;
    let mut seq = 0u64;
    let start = Instant::now();
    for _ in 0..puts {
        // The next put starts a new file when it (plus an end blank) does not fit.
        let rolls = end > 0 && end % file_size + step + END_BLANK > file_size;
        let t0 = rolls.then(Instant::now);
        if batch == 1 {
            let props = single.set(seq);
            end = store.put_message(&meta, &body, props)?.end_offset();
        } else {
            for (i, p) in batch_props.iter_mut().enumerate() {
                p.set(seq + i as u64);
            }
            let items: Vec<BatchItem> = batch_props
                .iter()
                .map(|p| BatchItem {
                    flag: 0,
                    body: &body,
                    properties: &p.buf,
                })
                .collect();
            end = store.put_messages(&meta, &items)?.end_offset();
        }
        seq += batch as u64;
        if let Some(t0) = t0 {
            let now = Instant::now();
            roll_ms.push(secs(now - t0) * 1e3);
            seg_rates.push(seg_msgs as f64 / secs(now - seg_start));
            seg_start = now;
            seg_msgs = 0;
        }
        seg_msgs += batch as u64;
    }
    let elapsed = secs(start.elapsed());
    let msgs = seq;
    let bytes = msgs * rec_len;
    let rate = msgs as f64 / elapsed;

    // Reads: scan the queue from the start, `read_batch` messages per call.
    let read = if batch == 1 && o.runs("read") {
        Some(bench_read(o, &store, body_len, rec_len as usize)?)
    } else {
        None
    };

    let close_start = Instant::now();
    store.close()?;
    let close_secs = secs(close_start.elapsed());
    drop(store);
    remove_dir(&root);

    let ratio = memcpy_rate.map(|m| rate / m);
    let (seg_min, seg_max) = seg_rates
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), r| {
            (lo.min(*r), hi.max(*r))
        });
    let roll_max = roll_ms.iter().copied().fold(0.0f64, f64::max);
    let mut vs = match ratio {
        Some(r) => format!("{:.0}% of memcpy", r * 100.0),
        None => String::new(),
    };
    if !seg_rates.is_empty() {
        let _ = write!(
            vs,
            "; per file {}-{}/s; {} rolls, max {:.1} ms",
            fmt_rate(seg_min).replace(' ', ""),
            fmt_rate(seg_max).replace(' ', ""),
            roll_ms.len(),
            roll_max
        );
    }
    let name = if batch == 1 {
        "ASYNC put_message"
    } else {
        "ASYNC put_messages"
    };
    let row = Row {
        bench: name.into(),
        body: Some(body_len),
        record: Some(rec_len as usize),
        threads: 1,
        batch,
        count: msgs,
        seconds: elapsed,
        rate,
        mb_per_sec: Some(bytes as f64 / elapsed / 1e6),
        vs: vs.trim_start_matches("; ").to_string(),
        extra: vec![
            ("ratio_to_memcpy".into(), Json::from(ratio)),
            ("target_ratio_to_memcpy".into(), Json::from(0.5)),
            ("record_bytes_total".into(), Json::from(bytes)),
            (
                "commitlog_files".into(),
                Json::from(end.div_ceil(file_size)),
            ),
            ("per_file_msgs_per_sec".into(), Json::from(&seg_rates[..])),
            ("roll_put_ms".into(), Json::from(&roll_ms[..])),
            ("open_secs".into(), Json::from(open_secs)),
            ("close_secs".into(), Json::from(close_secs)),
        ],
    };
    Ok(AppendOut { row, read })
}

fn bench_read(o: &Opts, store: &MessageStore, body_len: usize, rec_len: usize) -> BoxResult<Row> {
    let max = Duration::from_secs_f64(o.read_max_secs);
    let mut offset = 0i64;
    let (mut msgs, mut bytes, mut calls) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    loop {
        let r = store.get_messages(TOPIC, 0, offset, o.read_batch, o.read_max_bytes, None)?;
        if r.status != GetStatus::Found {
            break;
        }
        calls += 1;
        msgs += r.message_count as u64;
        bytes += r.body.len() as u64;
        offset = r.next_begin_offset;
        if calls % 256 == 0 && start.elapsed() >= max {
            break;
        }
    }
    let elapsed = secs(start.elapsed());
    Ok(Row {
        bench: "get_messages scan".into(),
        body: Some(body_len),
        record: Some(rec_len),
        threads: 1,
        batch: o.read_batch,
        count: msgs,
        seconds: elapsed,
        rate: msgs as f64 / elapsed,
        mb_per_sec: Some(bytes as f64 / elapsed / 1e6),
        vs: format!("{} calls", calls),
        extra: vec![
            ("calls".into(), Json::from(calls)),
            ("bytes".into(), Json::from(bytes)),
            ("max_bytes_per_call".into(), Json::from(o.read_max_bytes)),
        ],
    })
}

// ---------------------------------------------------------------------------------------------
// Store: SYNC_FLUSH group commit
// ---------------------------------------------------------------------------------------------

struct ThreadOut {
    msgs: u64,
    timeouts: u64,
    lat_us: Vec<u32>,
}

/// SYNC_FLUSH group commit: `threads` appenders each `put_message` then `wait_flushed` on
/// their record, for `sync_secs`. With `steady`, the CommitLog is first filled (batch puts,
/// no waiting) past its first file, so the timed appends land in a file the store pre-touched
/// in the background, as in a broker that has been running for a while; without it they land
/// in the first file of a fresh store.
fn bench_sync(
    o: &Opts,
    dir: &Path,
    threads: usize,
    steady: bool,
    fsync_rate: Option<f64>,
) -> BoxResult<Row> {
    let root = dir.join(format!("sync-{threads}-{}", if steady { "s" } else { "f" }));
    let store = Arc::new(MessageStore::open(store_config(
        o,
        &root,
        FlushDiskType::Sync,
    ))?);
    let body = Arc::new(make_body(o.sync_body));
    let rec_len = stored_record_len(o.sync_body);
    // Warm up: create the first CommitLog file and every consume queue.
    for q in 0..o.sync_queues {
        let r = store.put_message(&meta(q), &body, Props::new(999).set(q as u64))?;
        store.wait_flushed(r.end_offset(), store.sync_flush_timeout());
    }
    let mut prefilled = 0u64;
    if steady {
        let mut props: Vec<Props> = (0..64).map(|i| Props::new(1000 + i)).collect();
        let mut seq = 0u64;
        let mut end = 0u64;
        while end < o.file_size as u64 + 4 * MIB {
            for (i, p) in props.iter_mut().enumerate() {
                p.set(seq + i as u64);
            }
            seq += props.len() as u64;
            let items: Vec<BatchItem> = props
                .iter()
                .map(|p| BatchItem {
                    flag: 0,
                    body: &body,
                    properties: &p.buf,
                })
                .collect();
            end = store.put_messages(&meta(0), &items)?.end_offset();
        }
        if !store.wait_flushed(end, Duration::from_secs(120)) {
            return Err("prefill flush timed out".into());
        }
        prefilled = end;
    } else {
        quiesce();
    }
    // Give the background preallocation of the next CommitLog file time to finish. (The
    // steady variant skips `sync()`: it would write back and write-protect the pre-touched
    // pages of the current file.)
    std::thread::sleep(Duration::from_millis(if o.quick { 200 } else { 1000 }));

    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(threads + 1));
    let mut handles = Vec::new();
    for t in 0..threads {
        let (store, body, stop, barrier) =
            (store.clone(), body.clone(), stop.clone(), barrier.clone());
        let queue_id = t as i32 % o.sync_queues;
        handles.push(std::thread::spawn(
            move || -> ferromq_store::Result<ThreadOut> {
                let meta = meta(queue_id);
                let mut props = Props::new(t as u64 + 1);
                let timeout = store.sync_flush_timeout();
                let mut out = ThreadOut {
                    msgs: 0,
                    timeouts: 0,
                    lat_us: Vec::with_capacity(1 << 16),
                };
                barrier.wait();
                while !stop.load(Ordering::Relaxed) {
                    let t0 = Instant::now();
                    let r = store.put_message(&meta, &body, props.set(out.msgs + out.timeouts))?;
                    if store.wait_flushed(r.end_offset(), timeout) {
                        out.msgs += 1;
                    } else {
                        out.timeouts += 1;
                    }
                    out.lat_us
                        .push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
                }
                Ok(out)
            },
        ));
    }
    let dev = scratch_device(dir);
    let disk_before = DiskStats::read(dev.as_deref());
    barrier.wait();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(o.sync_secs));
    stop.store(true, Ordering::Relaxed);
    let mut msgs = 0u64;
    let mut timeouts = 0u64;
    let mut lat: Vec<u32> = Vec::new();
    for h in handles {
        let out = h.join().map_err(|_| "appender thread panicked")??;
        msgs += out.msgs;
        timeouts += out.timeouts;
        lat.extend(out.lat_us);
    }
    let elapsed = secs(start.elapsed());
    let disk = disk_before
        .map(|b| b.delta_json(DiskStats::read(dev.as_deref()), msgs))
        .unwrap_or_default();
    let store = Arc::try_unwrap(store).map_err(|_| "store still shared")?;
    store.close()?;
    drop(store);
    remove_dir(&root);

    lat.sort_unstable();
    let rate = msgs as f64 / elapsed;
    let ratio = fsync_rate.map(|f| rate / f);
    let p50 = percentile(&lat, 0.5).unwrap_or(0);
    let p99 = percentile(&lat, 0.99).unwrap_or(0);
    let target = if threads >= 64 { Some(20.0) } else { None };
    let mut vs = ratio.map_or(String::new(), |r| format!("{r:.1}x fdatasync; "));
    let _ = write!(vs, "p50 {p50} us, p99 {p99} us");
    if timeouts > 0 {
        let _ = write!(vs, "; {timeouts} TIMEOUTS");
    }
    Ok(Row {
        bench: if steady {
            "SYNC put+wait (steady)".into()
        } else {
            "SYNC put+wait (1st file)".into()
        },
        body: Some(o.sync_body),
        record: Some(rec_len),
        threads,
        batch: 1,
        count: msgs,
        seconds: elapsed,
        rate,
        mb_per_sec: Some((msgs * rec_len as u64) as f64 / elapsed / 1e6),
        vs,
        extra: vec![
            ("ratio_to_fdatasync".into(), Json::from(ratio)),
            ("target_ratio_to_fdatasync".into(), Json::from(target)),
            ("timeouts".into(), Json::from(timeouts)),
            ("p50_us".into(), Json::from(p50 as u64)),
            ("p99_us".into(), Json::from(p99 as u64)),
            ("max_us".into(), Json::from(lat.last().map(|x| *x as u64))),
            ("queues".into(), Json::from(o.sync_queues)),
            ("steady_state".into(), Json::from(steady)),
            ("prefilled_bytes".into(), Json::from(prefilled)),
        ]
        .into_iter()
        .chain(disk)
        .collect(),
    })
}

// ---------------------------------------------------------------------------------------------

fn params_json(o: &Opts) -> Json {
    obj![
        ("quick", o.quick),
        ("body_sizes", &o.sizes[..]),
        (
            "record_sizes",
            &o.sizes
                .iter()
                .map(|s| stored_record_len(*s))
                .collect::<Vec<_>>()[..]
        ),
        ("properties_bytes", Props::new(0).len()),
        ("topic", TOPIC),
        ("mapped_file_size_commitlog", o.file_size),
        ("append_bytes_single", o.append_bytes),
        ("append_bytes_batch", o.batch_bytes),
        ("batch_size", o.batch_size),
        ("memcpy_bytes", o.memcpy_bytes),
        ("fdatasync_record_bytes", o.fsync_record),
        ("fdatasync_seconds", o.fsync_secs),
        ("sync_body_bytes", o.sync_body),
        ("sync_threads", &o.sync_threads[..]),
        ("sync_seconds", o.sync_secs),
        ("sync_queues", o.sync_queues),
        ("read_max_seconds", o.read_max_secs),
        ("read_batch", o.read_batch),
        ("read_max_bytes", o.read_max_bytes),
        ("max_hash_slot_num", o.slot_num),
        ("max_index_num", o.index_num),
    ]
}

fn main() {
    if let Err(e) = run() {
        eprintln!("store-bench: {e}");
        std::process::exit(1);
    }
}

fn run() -> BoxResult<()> {
    let o = parse_args()?;
    if cfg!(debug_assertions) {
        eprintln!("warning: debug build; use `cargo run --release` for meaningful numbers");
    }
    let scratch = Scratch::new(&o.parent_dir)?;
    let dir = scratch.path.clone();
    let env = environment(&dir);
    let started = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let wall = Instant::now();
    eprintln!(
        "store-bench{}: scratch dir {}",
        if o.quick { " (quick)" } else { "" },
        dir.display()
    );

    let mut rows: Vec<Row> = Vec::new();
    let progress = |r: &Row| {
        eprintln!(
            "  {:<28} body {:>5}  thr {:>2}  batch {:>3}: {:>10}/s  {}",
            r.bench,
            r.body.map_or("-".to_string(), |b| b.to_string()),
            r.threads,
            r.batch,
            fmt_rate(r.rate),
            r.vs
        );
    };

    // a(i) memcpy into a warm mapping, per record size; and into fresh pre-touched files.
    let mut memcpy_rate = Vec::new();
    if o.runs("memcpy") {
        for &size in &o.sizes {
            let rec = stored_record_len(size);
            let mut row = bench_memcpy(&dir, o.file_size, rec, o.memcpy_bytes)?;
            row.body = Some(size);
            progress(&row);
            memcpy_rate.push((size, row.rate));
            rows.push(row);
        }
        for &size in &o.sizes {
            let rec = stored_record_len(size);
            let mut row = bench_memcpy_fresh(&dir, o.file_size, rec, o.append_bytes)?;
            row.body = Some(size);
            progress(&row);
            rows.push(row);
        }
    }
    let memcpy_of = |size: usize| memcpy_rate.iter().find(|(s, _)| *s == size).map(|x| x.1);

    // b + e: ASYNC single puts across roll-overs, then sequential reads of the same store.
    let mut reads = Vec::new();
    if o.runs("append") || o.runs("read") {
        for &size in &o.sizes {
            quiesce();
            let out = bench_append(&o, &dir, size, 1, o.append_bytes, memcpy_of(size))?;
            if o.runs("append") {
                progress(&out.row);
                rows.push(out.row);
            }
            if let Some(r) = out.read {
                progress(&r);
                reads.push(r);
            }
        }
    }

    // c: ASYNC batches.
    if o.runs("batch") {
        for &size in &o.sizes {
            quiesce();
            let out = bench_append(&o, &dir, size, o.batch_size, o.batch_bytes, memcpy_of(size))?;
            progress(&out.row);
            rows.push(out.row);
        }
    }
    rows.extend(reads);

    // a(ii) + d: fdatasync baseline, then SYNC_FLUSH group commit.
    let mut fsync_rate = None;
    if o.runs("fsync") {
        quiesce();
        let fsync = bench_fdatasync(&dir, o.fsync_record, o.fsync_secs)?;
        progress(&fsync);
        fsync_rate = Some(fsync.rate);
        rows.push(fsync);
    }
    if o.runs("sync") {
        for steady in [false, true] {
            for &threads in &o.sync_threads {
                quiesce();
                let row = bench_sync(&o, &dir, threads, steady, fsync_rate)?;
                progress(&row);
                rows.push(row);
            }
        }
    }

    let total_secs = secs(wall.elapsed());
    let text = table(&rows);
    println!();
    println!(
        "ferromq store benchmark (Rust{}), {} CPUs, kernel {}, {:.0} s",
        if o.quick { ", --quick" } else { "" },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        read_trim("/proc/sys/kernel/osrelease").unwrap_or_default(),
        total_secs
    );
    print!("{text}");

    let doc = obj![
        ("benchmark", "ferromq store (Rust, store-bench)"),
        ("started_utc", started),
        ("total_seconds", total_secs),
        ("parameters", params_json(&o)),
        ("environment", env),
        ("loadavg_at_end", loadavg()),
        ("results", Json::Arr(rows.iter().map(Row::json).collect())),
        ("table", text),
    ];
    let mut s = String::new();
    doc.write(&mut s, 0);
    s.push('\n');
    if let Some(parent) = o.json.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent)?;
    }
    fs::write(&o.json, s)?;
    println!("results written to {}", o.json.display());
    drop(scratch);
    Ok(())
}
