//! A native send load for the broker benchmarks: C connections x K SEND_MESSAGE_V2 requests in
//! flight each (closed loop), JSON headers as a Java producer writes them, on one thread.
//!
//! benches/hot_path_bench.py's Python load generator costs more CPU per message than the
//! broker's data plane; measuring how the broker scales over cores needs a load that leaves
//! them to the broker. Prints `RESULT` and a JSON object as the Python generator's `send` phase does:
//! count, total, elapsed, errors, p50_ms, p99_ms, p999_ms.
//!
//! `--bodies json` sends, in turn, a pool of distinct JSON order events of `--size` bytes each
//! (at least 4096 and 8 MiB of them, built at start) instead of `--size` bytes of b'x' (`same`,
//! the default), which any Parquet writer dictionary-encodes to nothing: what table topics cost
//! on real traffic.
//!
//! `--lite-topics N` gives request `i` the lite topic `lt<i % N>` (`__LITE_TOPIC`, RocketMQ 5.5):
//! with N at least `--count`, every message makes a lite topic of its own. `--count M` stops once
//! M sends were answered (the measure then runs from the first, without warm-up).
//!
//! ferromq-loadgen --port P [--topic T] [--queues 8] [--size 1024] [--bodies same|json]
//!     [--connections 4] [--inflight 16] [--seconds 5] [--warmup 1] [--lite-topics N] [--count M]

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

const SEND_MESSAGE_V2: i32 = 310;
const UPDATE_AND_CREATE_TOPIC: i32 = 17;
/// Sends built and written together at most (one write per batch of freed slots).
const MAX_BATCH: usize = 64;

struct Args {
    port: u16,
    topic: String,
    queues: i32,
    size: usize,
    bodies: String,
    connections: usize,
    inflight: usize,
    seconds: f64,
    warmup: f64,
    /// 0: no lite topic.
    lite_topics: u64,
    /// 0: run `seconds`.
    count: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        port: 0,
        topic: "HotPathBench".to_string(),
        queues: 8,
        size: 1024,
        bodies: "same".to_string(),
        connections: 4,
        inflight: 16,
        seconds: 5.0,
        warmup: 1.0,
        lite_topics: 0,
        count: 0,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut it = argv.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let bad = |_| format!("{flag}: not a number: {value}");
        match flag.as_str() {
            "--port" => a.port = value.parse().map_err(bad)?,
            "--topic" => a.topic = value.clone(),
            "--queues" => a.queues = value.parse().map_err(bad)?,
            "--size" => a.size = value.parse().map_err(bad)?,
            "--bodies" if value == "same" || value == "json" => a.bodies = value.clone(),
            "--bodies" => return Err(format!("--bodies: same or json, not {value}")),
            "--connections" => a.connections = value.parse().map_err(bad)?,
            "--inflight" => a.inflight = value.parse().map_err(bad)?,
            "--seconds" => a.seconds = value.parse().map_err(|_| format!("{flag}: {value}"))?,
            "--warmup" => a.warmup = value.parse().map_err(|_| format!("{flag}: {value}"))?,
            "--lite-topics" => a.lite_topics = value.parse().map_err(bad)?,
            "--count" => a.count = value.parse().map_err(bad)?,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if a.port == 0 {
        return Err("--port is required".to_string());
    }
    Ok(a)
}

/// A JSON request header with `ext` and a placeholder opaque, split around the values each
/// request changes (opaque, queue id, UNIQ_KEY) so that building one is a few copies.
struct Template {
    parts: Vec<Vec<u8>>,
}

const OPAQUE_MARK: &str = "999999999";
const QUEUE_MARK: &str = "@QID@";
const UNIQ_MARK: &str = "@UNIQ@";
const LITE_MARK: &str = "@LITE@";

impl Template {
    /// With `lite`, the requests carry a lite topic (see [`Template::frame`]).
    fn new(topic: &str, lite: bool) -> Template {
        let born = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
            .to_string();
        let lite_prop = if lite {
            format!("__LITE_TOPIC\u{1}lt{LITE_MARK}\u{2}")
        } else {
            String::new()
        };
        let props = format!(
            "TAGS\u{1}TagA\u{2}KEYS\u{1}key-1\u{2}WAIT\u{1}true\u{2}UNIQ_KEY\u{1}{UNIQ_MARK}\u{2}{lite_prop}"
        );
        let ext = serde_json::json!({
            "a": "PID_hot", "b": topic, "c": "TBW102", "d": "4", "e": QUEUE_MARK, "f": "0",
            "g": born, "h": "0", "i": props, "j": "0", "k": "false", "m": "false",
        });
        let header = serde_json::json!({
            "code": SEND_MESSAGE_V2, "extFields": ext, "flag": 0, "language": "JAVA",
            "opaque": 999_999_999, "version": 399,
        })
        .to_string();
        // The marks in the order they occur: opaque last (serde_json sorts keys: extFields first).
        let mut parts = Vec::new();
        let mut rest = header.as_str();
        let marks: &[&str] = if lite {
            &[QUEUE_MARK, UNIQ_MARK, LITE_MARK, OPAQUE_MARK]
        } else {
            &[QUEUE_MARK, UNIQ_MARK, OPAQUE_MARK]
        };
        for mark in marks {
            let at = rest.find(mark).expect("mark in the rendered header");
            parts.push(rest.as_bytes()[..at].to_vec());
            rest = &rest[at + mark.len()..];
        }
        parts.push(rest.as_bytes().to_vec());
        Template { parts }
    }

    /// Appends a whole request frame to `out`; `lite` is its lite topic's number when the
    /// template has one.
    fn frame(&self, out: &mut Vec<u8>, opaque: i32, queue_id: i32, lite: u64, body: &[u8]) {
        let queue = queue_id.to_string();
        let uniq = format!("0A000001{:024X}", opaque as u32);
        let op = opaque.to_string();
        let lite = lite.to_string();
        let values: Vec<&[u8]> = if self.parts.len() == 5 {
            vec![
                queue.as_bytes(),
                uniq.as_bytes(),
                lite.as_bytes(),
                op.as_bytes(),
            ]
        } else {
            vec![queue.as_bytes(), uniq.as_bytes(), op.as_bytes()]
        };
        let header_len: usize = self.parts.iter().map(Vec::len).sum::<usize>()
            + values.iter().map(|v| v.len()).sum::<usize>();
        out.extend_from_slice(&((4 + header_len + body.len()) as i32).to_be_bytes());
        out.extend_from_slice(&(header_len as i32).to_be_bytes());
        for (part, value) in self.parts.iter().zip(values) {
            out.extend_from_slice(part);
            out.extend_from_slice(value);
        }
        out.extend_from_slice(self.parts.last().unwrap());
        out.extend_from_slice(body);
    }
}

/// The bodies the requests carry: one body of b'x' (`same`), or a pool of distinct JSON order
/// events (`json`), all of one size, back to back in one buffer. Request `i` carries body
/// `i % count`: choosing one is an index, not an allocation.
struct Bodies {
    data: Vec<u8>,
    size: usize,
    count: usize,
}

/// Distinct bodies in a `json` pool: at least `JSON_POOL` and `JSON_POOL_MIN_BYTES` of them, more
/// than a Parquet dictionary page holds (1 MiB): each queue's bodies overflow a table file's
/// dictionary as real ones do. At most `JSON_POOL_MAX` and `JSON_POOL_MAX_BYTES` (large bodies).
const JSON_POOL: usize = 4096;
const JSON_POOL_MIN_BYTES: usize = 8 << 20;
const JSON_POOL_MAX: usize = 1 << 17;
const JSON_POOL_MAX_BYTES: usize = 64 << 20;

/// The size of a `json` pool for bodies of `size` bytes: a prime, so that each queue (`opaque %
/// queues`) gets every body of the pool in turn (`opaque % count`), not a 1/queues share of it.
fn json_pool_count(size: usize) -> usize {
    let size = size.max(1);
    let want = JSON_POOL
        .max(JSON_POOL_MIN_BYTES / size)
        .min(JSON_POOL_MAX)
        .min(JSON_POOL_MAX_BYTES / size)
        .max(2);
    let prime = |n: usize| {
        (2..)
            .take_while(|d| d * d <= n)
            .all(|d| !n.is_multiple_of(d))
    };
    (2..=want).rev().find(|&n| prime(n)).unwrap_or(2)
}

impl Bodies {
    fn new(kind: &str, size: usize) -> Bodies {
        if kind != "json" {
            return Bodies {
                data: vec![b'x'; size],
                size,
                count: 1,
            };
        }
        let count = json_pool_count(size);
        let mut rng = SplitMix64(0x5EED_F00D);
        let mut data = Vec::with_capacity(count * size);
        for seq in 0..count {
            data.extend_from_slice(&order_event(&mut rng, seq, size));
        }
        Bodies { data, size, count }
    }

    fn get(&self, i: usize) -> &[u8] {
        let at = (i % self.count) * self.size;
        &self.data[at..at + self.size]
    }
}

/// splitmix64: a seeded PRNG, enough to vary the bodies (the pool is the same on every run).
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }

    fn hex(&mut self, out: &mut String, n: usize) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        for _ in 0..n {
            out.push(HEX[self.below(16) as usize] as char);
        }
    }

    fn base64(&mut self, out: &mut String, n: usize) {
        const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        for _ in 0..n {
            out.push(B64[self.below(64) as usize] as char);
        }
    }
}

const FIRST: &[&str] = &[
    "alice", "bruno", "chloe", "david", "emma", "farid", "giulia", "hugo", "ines", "jonas",
    "kenji", "lea", "marco", "nadia", "oscar", "priya", "quentin", "rosa", "samir", "tess",
];
const LAST: &[&str] = &[
    "martin", "bernard", "dubois", "rossi", "muller", "garcia", "nguyen", "kowalski", "smith",
    "tanaka", "silva", "jensen", "haddad", "novak", "moreau", "lopez",
];
const CITIES: &[&str] = &[
    "\"city\":\"Lyon\",\"country\":\"FR\",\"zip\":\"6900",
    "\"city\":\"Paris\",\"country\":\"FR\",\"zip\":\"7501",
    "\"city\":\"Berlin\",\"country\":\"DE\",\"zip\":\"1011",
    "\"city\":\"Hamburg\",\"country\":\"DE\",\"zip\":\"2009",
    "\"city\":\"Milano\",\"country\":\"IT\",\"zip\":\"2012",
    "\"city\":\"Madrid\",\"country\":\"ES\",\"zip\":\"2801",
    "\"city\":\"Amsterdam\",\"country\":\"NL\",\"zip\":\"1012",
    "\"city\":\"Warszawa\",\"country\":\"PL\",\"zip\":\"0012",
];
const PRODUCTS: &[&str] = &[
    "Linen shirt",
    "Espresso beans 1kg",
    "Running shoes",
    "USB-C cable 2m",
    "Ceramic mug",
    "Wool socks (3 pairs)",
    "Desk lamp",
    "Paperback novel",
    "Yoga mat",
    "Bluetooth speaker",
    "Chef knife 20cm",
    "Green tea 100g",
    "Backpack 28L",
    "Phone case",
    "Notebook A5",
    "Water bottle",
];
const STATUS: &[&str] = &[
    "created",
    "paid",
    "packed",
    "shipped",
    "delivered",
    "cancelled",
];
const TIERS: &[&str] = &["standard", "silver", "gold", "platinum"];
const PAYMENTS: &[&str] = &["card", "paypal", "sepa", "apple_pay", "gift_card"];
const CHANNELS: &[&str] = &["web", "ios", "android", "store"];

/// One order event as a producer would send it: JSON of exactly `size` bytes. Head fields while
/// they fit, then as many line items as fit (with the order's amount), then a `note` of random
/// hex filling the rest (a few spaces when a note does not fit; cut when not even `{}` does).
fn order_event(rng: &mut SplitMix64, seq: usize, size: usize) -> Vec<u8> {
    let (first, last) = (rng.pick(FIRST), rng.pick(LAST));
    let ms = 8 * 3_600_000 + seq as u64 * 37 + rng.below(37);
    let ts = format!(
        "2026-11-26T{:02}:{:02}:{:02}.{:03}Z",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    );
    let mut trace = String::new();
    rng.hex(&mut trace, 32);
    // A signature: 32 random bytes in base64, as webhooks carry one.
    let mut sig = String::new();
    rng.base64(&mut sig, 43);
    let head = [
        format!("\"type\":\"order.{}\"", rng.pick(STATUS)),
        format!("\"orderId\":\"ORD-20261126-{:08}\"", 100_000 + seq),
        format!("\"seq\":{seq}"),
        format!("\"ts\":\"{ts}\""),
        format!("\"traceId\":\"{trace}\""),
        format!(
            "\"user\":{{\"id\":\"u-{}\",\"name\":\"{first} {last}\",\"email\":\"{first}.{last}@example.com\",\"tier\":\"{}\"}}",
            rng.below(900_000) + 100_000,
            rng.pick(TIERS)
        ),
        format!("\"channel\":\"{}\"", rng.pick(CHANNELS)),
        format!(
            "\"clientIp\":\"{}.{}.{}.{}\"",
            rng.below(223) + 1,
            rng.below(256),
            rng.below(256),
            rng.below(254) + 1
        ),
        format!(
            "\"shipping\":{{{}{}\"}}",
            rng.pick(CITIES),
            rng.below(10)
        ),
        format!("\"payment\":\"{}\"", rng.pick(PAYMENTS)),
        "\"currency\":\"EUR\"".to_string(),
        format!("\"sig\":\"{sig}=\""),
    ];
    let mut out = String::with_capacity(size + 64);
    out.push('{');
    // A field goes in when it and the closing brace fit.
    let fits = |out: &String, len: usize| out.len() + usize::from(out.len() > 1) + len < size;
    let mut all_head = true;
    for field in &head {
        if !fits(&out, field.len()) {
            all_head = false;
            break;
        }
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(field);
    }
    if all_head {
        // Line items while they fit together with `],"amount":...`, built once (no re-rendering).
        let mut items = String::new();
        let mut cents = 0u64;
        loop {
            let price = 199 + rng.below(12_000);
            let qty = 1 + rng.below(4);
            let item = format!(
                "{{\"sku\":\"SKU-{:05}\",\"name\":\"{}\",\"qty\":{qty},\"price\":{}.{:02}}}",
                rng.below(40_000),
                rng.pick(PRODUCTS),
                price / 100,
                price % 100
            );
            let total = cents + price * qty;
            let amount = format!("],\"amount\":{}.{:02}", total / 100, total % 100);
            let len = "\"items\":[".len() + items.len() + usize::from(!items.is_empty());
            if !fits(&out, len + item.len() + amount.len()) {
                break;
            }
            if !items.is_empty() {
                items.push(',');
            }
            items.push_str(&item);
            cents = total;
        }
        if !items.is_empty() {
            out.push_str(",\"items\":[");
            out.push_str(&items);
            out.push_str(&format!("],\"amount\":{}.{:02}", cents / 100, cents % 100));
        }
    }
    // The rest: a note (random hex), or a few spaces where not even an empty note fits.
    let room = size.saturating_sub(out.len() + 1);
    let note = usize::from(out.len() > 1) + "\"note\":\"\"".len();
    if room >= note {
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str("\"note\":\"");
        rng.hex(&mut out, room - note);
        out.push('"');
    } else {
        out.push_str(&" ".repeat(room));
    }
    out.push('}');
    let mut bytes = out.into_bytes();
    bytes.truncate(size);
    bytes
}

#[derive(Default)]
struct Tally {
    latencies: Vec<f64>,
    errors: HashMap<i32, u64>,
}

struct Shared {
    measure: AtomicBool,
    stop: AtomicBool,
    total: AtomicU64,
    /// Requests built so far (over every connection): what `--count` and `--lite-topics` count.
    issued: AtomicU64,
    /// 0: no limit.
    count: u64,
    lite_topics: u64,
    tally: Mutex<Tally>,
}

/// (code, opaque) of a reply header.
fn code_and_opaque(header: &[u8]) -> Option<(i32, i32)> {
    let v: serde_json::Value = serde_json::from_slice(header).ok()?;
    Some((v["code"].as_i64()? as i32, v["opaque"].as_i64()? as i32))
}

async fn read_frame(rd: &mut OwnedReadHalf, buf: &mut Vec<u8>) -> io::Result<(i32, i32)> {
    let mut len = [0u8; 4];
    rd.read_exact(&mut len).await?;
    let len = i32::from_be_bytes(len) as usize;
    buf.resize(len, 0);
    rd.read_exact(buf).await?;
    let header_len = (u32::from_be_bytes(buf[..4].try_into().unwrap()) & 0x00FF_FFFF) as usize;
    code_and_opaque(&buf[4..4 + header_len.min(len - 4)])
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unreadable reply header"))
}

async fn create_topic(port: u16, topic: &str, queues: i32) -> io::Result<()> {
    let (mut rd, mut wr) = TcpStream::connect(("127.0.0.1", port)).await?.into_split();
    let q = queues.to_string();
    let header = serde_json::json!({
        "code": UPDATE_AND_CREATE_TOPIC,
        // The fields Java's CreateTopicRequestHeader requires, as its admin client sends them.
        "extFields": {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": q, "writeQueueNums": q,
            "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false",
        },
        "flag": 0, "language": "JAVA", "opaque": 1, "version": 399,
    })
    .to_string();
    let mut frame = Vec::new();
    frame.extend_from_slice(&((4 + header.len()) as i32).to_be_bytes());
    frame.extend_from_slice(&(header.len() as i32).to_be_bytes());
    frame.extend_from_slice(header.as_bytes());
    wr.write_all(&frame).await?;
    let (code, _) = read_frame(&mut rd, &mut Vec::new()).await?;
    if code != 0 {
        return Err(io::Error::other(format!(
            "UPDATE_AND_CREATE_TOPIC answered {code}"
        )));
    }
    Ok(())
}

/// One connection's requests in flight: free slots, and when each opaque was sent.
struct Lane {
    slots: Semaphore,
    sent: Mutex<HashMap<i32, Instant>>,
}

async fn writer(
    shared: Arc<Shared>,
    tpl: Arc<Template>,
    mut wr: OwnedWriteHalf,
    lane: Arc<Lane>,
    first_opaque: i32,
    queues: i32,
    bodies: Arc<Bodies>,
) -> io::Result<()> {
    let (slots, sent) = (&lane.slots, &lane.sent);
    let mut opaque = first_opaque;
    let mut out = Vec::with_capacity(MAX_BATCH * (bodies.size + 512));
    while !shared.stop.load(Ordering::Acquire) {
        let Ok(first) = slots.acquire().await else {
            return Ok(());
        };
        first.forget();
        let mut n = 1;
        if shared.count > 0 && shared.issued.load(Ordering::Relaxed) >= shared.count {
            return Ok(());
        }
        while n < MAX_BATCH {
            match slots.try_acquire() {
                Ok(p) => {
                    p.forget();
                    n += 1;
                }
                Err(_) => break,
            }
        }
        out.clear();
        let now = Instant::now();
        {
            let mut sent = sent.lock().unwrap();
            for _ in 0..n {
                opaque = opaque.wrapping_add(1);
                // The next body of the pool in turn (the opaque counts this connection's requests).
                let body = bodies.get(opaque as u32 as usize);
                let i = shared.issued.fetch_add(1, Ordering::Relaxed);
                let lite = i % shared.lite_topics.max(1);
                tpl.frame(&mut out, opaque, opaque.rem_euclid(queues), lite, body);
                sent.insert(opaque, now);
            }
        }
        wr.write_all(&out).await?;
    }
    Ok(())
}

async fn reader(shared: Arc<Shared>, mut rd: OwnedReadHalf, lane: Arc<Lane>) {
    let mut buf = Vec::new();
    while let Ok((code, opaque)) = read_frame(&mut rd, &mut buf).await {
        let at = lane.sent.lock().unwrap().remove(&opaque);
        shared.total.fetch_add(1, Ordering::Relaxed);
        if shared.measure.load(Ordering::Acquire) {
            let mut t = shared.tally.lock().unwrap();
            match (code, at) {
                (0, Some(at)) => t.latencies.push(at.elapsed().as_secs_f64()),
                _ => *t.errors.entry(code).or_default() += 1,
            }
        }
        lane.slots.add_permits(1);
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((q * sorted.len() as f64) as usize).min(sorted.len() - 1)] * 1000.0
}

async fn run(a: Args) -> io::Result<serde_json::Value> {
    create_topic(a.port, &a.topic, a.queues).await?;
    let shared = Arc::new(Shared {
        measure: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        total: AtomicU64::new(0),
        issued: AtomicU64::new(0),
        count: a.count,
        lite_topics: a.lite_topics,
        tally: Mutex::new(Tally::default()),
    });
    let tpl = Arc::new(Template::new(&a.topic, a.lite_topics > 0));
    let bodies = Arc::new(Bodies::new(&a.bodies, a.size));
    let mut tasks = Vec::new();
    for c in 0..a.connections {
        let stream = TcpStream::connect(("127.0.0.1", a.port)).await?;
        stream.set_nodelay(true)?;
        let (rd, wr) = stream.into_split();
        let lane = Arc::new(Lane {
            slots: Semaphore::new(a.inflight),
            sent: Mutex::new(HashMap::new()),
        });
        let first = (c as i32) * 100_000_000;
        tasks.push(tokio::spawn(reader(shared.clone(), rd, lane.clone())));
        let w = writer(
            shared.clone(),
            tpl.clone(),
            wr,
            lane,
            first,
            a.queues,
            bodies.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let _ = w.await;
        }));
    }
    let started;
    if a.count > 0 {
        shared.measure.store(true, Ordering::Release);
        started = Instant::now();
        let deadline = started + Duration::from_secs_f64(a.seconds);
        while shared.total.load(Ordering::Relaxed) < a.count && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    } else {
        tokio::time::sleep(Duration::from_secs_f64(a.warmup)).await;
        shared.measure.store(true, Ordering::Release);
        started = Instant::now();
        tokio::time::sleep(Duration::from_secs_f64(a.seconds)).await;
    }
    shared.measure.store(false, Ordering::Release);
    let elapsed = started.elapsed().as_secs_f64();
    shared.stop.store(true, Ordering::Release);
    for t in &tasks {
        t.abort();
    }
    let mut tally = std::mem::take(&mut *shared.tally.lock().unwrap());
    tally.latencies.sort_by(f64::total_cmp);
    let lat = &tally.latencies;
    let errors: serde_json::Map<String, serde_json::Value> = tally
        .errors
        .iter()
        .map(|(code, n)| (code.to_string(), (*n).into()))
        .collect();
    Ok(serde_json::json!({
        "count": lat.len(),
        "total": shared.total.load(Ordering::Relaxed),
        "elapsed": elapsed,
        "errors": errors,
        "p50_ms": percentile(lat, 0.50),
        "p99_ms": percentile(lat, 0.99),
        "p999_ms": percentile(lat, 0.999),
    }))
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ferromq-loadgen: {e}");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match rt.block_on(run(args)) {
        Ok(out) => println!("RESULT {out}"),
        Err(e) => {
            eprintln!("ferromq-loadgen: {e}");
            std::process::exit(1);
        }
    }
}
