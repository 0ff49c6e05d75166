//! Who may use a box: a keyed box lets in only a head that proves the key, and says
//! nothing about its model to one that does not; a head with a key refuses a box that
//! cannot prove it; one head at a time, though the head itself may reconnect; a frame
//! announcing more than the box allows is refused as soon as its length is read.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use model::Part;
use split::auth::Key;
use split::frame::{Frame, Header, Message, StepRow, FAST_LANE, VERSION};
use split::head::{BoxClient, StateType};
use split::worker::Access;
use split::Credentials;

const FILE: &str = "qwen3-tiny.gguf";

fn keyed(key: &str) -> Access {
    Access {
        key: Some(Key::new(key, "test").unwrap()),
        ..Access::default()
    }
}

fn credentials(key: Option<&str>) -> Credentials {
    Credentials {
        key: key.map(|k| Key::new(k, "test").unwrap()),
        tls: None,
    }
}

fn connect(addr: SocketAddr, key: Option<&str>) -> split::Result<BoxClient> {
    let head = common::load(FILE, Part::Last(1));
    BoxClient::connect(addr, &head, StateType::F32, credentials(key))
}

fn n_embd() -> usize {
    common::load(FILE, Part::Last(1)).hparams.n_embd
}

fn forward_one(client: &mut BoxClient) {
    let rows = [StepRow {
        session: 1,
        pos: 0,
        token: 5,
    }];
    let mut states = vec![0f32; n_embd()];
    client.forward_rows(&rows, &[], &mut states).unwrap();
    assert!(states.iter().any(|&v| v != 0.0));
}

/// A connection that speaks frames by hand.
struct Raw(TcpStream);

impl Raw {
    fn open(addr: SocketAddr) -> Raw {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        Raw(s)
    }

    fn send(&mut self, frame: &Frame) {
        let mut b = BytesMut::new();
        frame.encode(&mut b);
        self.0.write_all(&(b.len() as u32).to_le_bytes()).unwrap();
        self.0.write_all(&b).unwrap();
    }

    fn recv(&mut self) -> Frame {
        let mut len = [0u8; 4];
        self.0.read_exact(&mut len).unwrap();
        let mut b = vec![0u8; u32::from_le_bytes(len) as usize];
        self.0.read_exact(&mut b).unwrap();
        Frame::decode(&b).unwrap()
    }

    /// Reads the challenge and says a keyless hello for the fast lane with `hash`.
    fn hello(&mut self, hash: u64) -> Frame {
        assert!(matches!(self.recv().message, Message::Challenge { .. }));
        self.send(&Frame {
            header: Header {
                version: VERSION,
                model_hash: hash,
                ..Header::default()
            },
            message: Message::Hello {
                split: 1,
                n_embd: n_embd() as u32,
                lane: FAST_LANE,
                link: 0,
                head: 7,
                nonce: [0; 32],
                proof: [0; 32],
            },
        });
        self.recv()
    }

    /// Announces a frame of `bytes` and sends none of them: the box's answer.
    fn announce(&mut self, bytes: u32) -> Frame {
        self.0.write_all(&bytes.to_le_bytes()).unwrap();
        self.recv()
    }
}

#[test]
fn a_keyed_box_lets_in_only_a_head_that_proves_its_key() {
    let (addr, hash) = common::start_box(FILE, 1, keyed("open sesame"));
    let err = connect(addr, None).err().unwrap().to_string();
    assert!(err.contains("asks for a key"), "{err}");
    let err = connect(addr, Some("open barley"))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("did not prove the box's key"), "{err}");
    assert!(!err.contains(&format!("{hash:016x}")), "{err}");
    // What the box says to a wrong key: a challenge and a refusal, neither carrying the
    // model's hash or the box's epoch.
    let mut raw = Raw::open(addr);
    let refusal = raw.hello(hash);
    assert_eq!((refusal.header.model_hash, refusal.header.epoch), (0, 0));
    match refusal.message {
        Message::Refused { reason } => {
            assert!(!reason.contains(&format!("{hash:016x}")), "{reason}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let mut client = connect(addr, Some("open sesame")).unwrap();
    forward_one(&mut client);

    let (open, _) = common::start_box(FILE, 1, Access::default());
    let err = connect(open, Some("open sesame"))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("holds no key"), "{err}");
}

#[test]
fn one_head_at_a_time_though_the_head_may_reconnect() {
    let (addr, _) = common::start_box(FILE, 1, keyed("k"));
    let mut first = connect(addr, Some("k")).unwrap();
    let err = connect(addr, Some("k")).err().unwrap().to_string();
    assert!(err.contains("another head holds this box"), "{err}");
    first.reconnect().unwrap();
    forward_one(&mut first);
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut second = loop {
        match connect(addr, Some("k")) {
            Ok(c) => break c,
            Err(e) if Instant::now() < deadline => {
                assert!(e.to_string().contains("another head"), "{e}");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("the box still refuses after the first head left: {e}"),
        }
    };
    forward_one(&mut second);
}

#[test]
fn a_frame_announcing_more_than_the_box_allows_is_refused_unread() {
    let (addr, hash) = common::start_box(FILE, 1, Access::default());
    // Before the hello: nothing longer than a hello.
    let mut raw = Raw::open(addr);
    assert!(matches!(raw.recv().message, Message::Challenge { .. }));
    match raw.announce(250 << 20).message {
        Message::Refused { reason } => assert!(reason.contains("frame size too big"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // After it: nothing longer than a forward of the whole context (512 rows here).
    let mut raw = Raw::open(addr);
    assert!(matches!(raw.hello(hash).message, Message::Welcome { .. }));
    raw.send(&Frame {
        header: Header {
            version: VERSION,
            seq: 1,
            ..Header::default()
        },
        message: Message::Ping,
    });
    assert_eq!(raw.recv().message, Message::Pong);
    match raw.announce(1 << 20).message {
        Message::Refused { reason } => assert!(reason.contains("frame size too big"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}
