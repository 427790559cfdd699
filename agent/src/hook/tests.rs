use super::*;
use std::fs;

const SESSION: &str = "c45af7b1-cb7c-4e51-93db-8cbb250a877a";
const THREAD: &str = "019e1625-789d-76c0-80ab-3724b5ddb799";

/// A device with one Claude session (and a subagent) and one Codex rollout.
fn device() -> anyhow::Result<(tempfile::TempDir, Paths, PathBuf, PathBuf, PathBuf)> {
    let tmp = tempfile::tempdir()?;
    let paths = Paths::under(tmp.path());
    let project = paths.claude_dir.join("projects/-workspace");
    let session = project.join(format!("{SESSION}.jsonl"));
    let subagent = project.join(SESSION).join("subagents/agent-af1ff21.jsonl");
    let rollout = paths.codex_dir.join(format!(
        "sessions/2026/05/11/rollout-2026-05-11T11-26-55-{THREAD}.jsonl"
    ));
    for f in [&session, &subagent, &rollout] {
        fs::create_dir_all(f.parent().unwrap_or(Path::new("/")))?;
        fs::write(f, "{}\n")?;
    }
    Ok((tmp, paths, session, subagent, rollout))
}

fn claude(path: &Path) -> Source {
    Source {
        runtime: AgentRuntime::ClaudeCode,
        path: path.to_owned(),
    }
}

#[test]
fn payloads_name_the_transcripts_to_capture() -> anyhow::Result<()> {
    let (_tmp, paths, session, subagent, rollout) = device()?;
    let codex = Source {
        runtime: AgentRuntime::Codex,
        path: rollout.clone(),
    };
    let s = session.display();
    let a = subagent.display();
    let r = rollout.display();
    let cases: Vec<(&str, String, Vec<Source>)> = vec![
        (
            "Claude Stop",
            format!(
                r#"{{"session_id":"{SESSION}","transcript_path":"{s}","cwd":"/workspace","permission_mode":"default","hook_event_name":"Stop","stop_hook_active":false,"last_assistant_message":"done"}}"#
            ),
            vec![claude(&session)],
        ),
        (
            "Claude SubagentStop: session first, then the subagent",
            format!(
                r#"{{"session_id":"{SESSION}","transcript_path":"{s}","hook_event_name":"SubagentStop","agent_id":"af1ff21","agent_type":"Explore","agent_transcript_path":"{a}"}}"#
            ),
            vec![claude(&session), claude(&subagent)],
        ),
        (
            "older SubagentStop with ids only (fasthooks sample)",
            format!(
                r#"{{"session_id": "{SESSION}", "hook_event_name": "SubagentStop", "cwd": "/workspace", "permission_mode": "default", "agent_id": "af1ff21", "stop_hook_active": false}}"#
            ),
            vec![claude(&session), claude(&subagent)],
        ),
        (
            "Claude PreCompact",
            format!(
                r#"{{"session_id":"{SESSION}","transcript_path":"{s}","hook_event_name":"PreCompact","trigger":"manual","custom_instructions":""}}"#
            ),
            vec![claude(&session)],
        ),
        (
            "Claude SessionEnd",
            format!(
                r#"{{"session_id":"{SESSION}","transcript_path":"{s}","hook_event_name":"SessionEnd","reason":"prompt_input_exit"}}"#
            ),
            vec![claude(&session)],
        ),
        (
            "Codex Stop hook with its rollout path",
            format!(
                r#"{{"session_id":"{THREAD}","turn_id":"t1","transcript_path":"{r}","cwd":"/w","hook_event_name":"Stop","model":"gpt-5","permission_mode":"default","stop_hook_active":false,"last_assistant_message":null}}"#
            ),
            vec![codex.clone()],
        ),
        (
            "Codex Stop hook without a path: found by thread id",
            format!(
                r#"{{"session_id":"{THREAD}","turn_id":"t1","transcript_path":null,"hook_event_name":"Stop"}}"#
            ),
            vec![codex.clone()],
        ),
        ("not JSON", "not json".into(), vec![]),
        (
            "a path that is not a string",
            r#"{"transcript_path": 42}"#.into(),
            vec![],
        ),
        (
            "a session id that tries to leave the folder",
            r#"{"session_id": "../../etc/passwd"}"#.into(),
            vec![],
        ),
    ];
    for (what, stdin, want) in cases {
        assert_eq!(
            targets(&paths, None, None, stdin.as_bytes()),
            want,
            "{what}"
        );
    }
    Ok(())
}

#[test]
fn codex_notify_and_pi_arguments_name_their_files() -> anyhow::Result<()> {
    let (_tmp, paths, _, _, rollout) = device()?;
    let notify = format!(
        r#"{{"type":"agent-turn-complete","thread-id":"{THREAD}","turn-id":"12345","cwd":"/w","input-messages":["fix it"],"last-assistant-message":"done"}}"#
    );
    assert_eq!(
        targets(&paths, None, Some(&notify), b""),
        vec![Source {
            runtime: AgentRuntime::Codex,
            path: rollout
        }]
    );
    let unknown = r#"{"type":"agent-turn-complete","thread-id":"zz"}"#;
    assert_eq!(targets(&paths, None, Some(unknown), b""), vec![]);
    let pi = paths
        .pi_dir
        .join("sessions/--w--/2026-01-01T00-00-00-000Z_abc.jsonl");
    assert_eq!(
        targets(&paths, Some(&pi), None, b""),
        vec![Source {
            runtime: AgentRuntime::Pi,
            path: pi
        }]
    );
    Ok(())
}

#[test]
fn the_hook_spools_first_and_never_fails() -> anyhow::Result<()> {
    let (_tmp, paths, session, _, _) = device()?;
    let payload = format!(
        r#"{{"session_id":"{SESSION}","transcript_path":"{}"}}"#,
        session.display()
    );
    // Not logged in here (or central unreachable): the delta waits.
    let settings = Settings::load(&paths, &Flags::default())?;
    let _ = capture_and_send(
        &paths,
        &settings,
        &targets(&paths, None, None, payload.as_bytes()),
    );
    assert_eq!(crate::outbox::Outbox::new(&paths.state_dir).len(), 1);
    // A file that does not exist is nothing to capture, not a failure.
    run(
        &paths,
        &Flags::default(),
        Some(paths.pi_dir.join("missing.jsonl")),
        None,
    );
    Ok(())
}

#[test]
fn the_payload_is_read_to_its_end_and_a_pipe_left_open_is_not_waited_on() -> anyhow::Result<()> {
    use std::os::unix::net::UnixStream;
    let wait = Duration::from_millis(200);
    // Written and closed: the whole payload.
    let (mut writer, reader) = UnixStream::pair()?;
    writer.write_all(b"{\"session_id\":\"s\"}")?;
    drop(writer);
    assert_eq!(
        read_within(&reader, wait, MAX_PAYLOAD),
        b"{\"session_id\":\"s\"}"
    );
    // Longer than the limit: the first `max` bytes, without waiting for the end.
    let (mut writer, reader) = UnixStream::pair()?;
    writer.write_all(&[b'x'; 100])?;
    assert_eq!(read_within(&reader, wait, 10), [b'x'; 10]);
    // Written but never closed: what came, once `wait` is over (a whole
    // payload is used; a cut one does not parse, and names nothing).
    let (mut writer, reader) = UnixStream::pair()?;
    writer.write_all(b"{\"session_id\":\"s\"}")?;
    let started = Instant::now();
    assert_eq!(
        read_within(&reader, wait, MAX_PAYLOAD),
        b"{\"session_id\":\"s\"}"
    );
    assert!(started.elapsed() < wait * 5, "{:?}", started.elapsed());
    drop(writer);
    // A payload cut short that way names no transcript.
    let (mut writer, reader) = UnixStream::pair()?;
    writer.write_all(b"{\"session_id\":\"s\",\"transcript_path\":\"/tmp/x.jsonl")?;
    let cut = read_within(&reader, wait, MAX_PAYLOAD);
    let (_tmp, paths, ..) = device()?;
    assert!(targets(&paths, None, None, &cut).is_empty(), "{cut:?}");
    drop(writer);
    Ok(())
}

/// Cursor's `stop` payload names its transcript (or, with a null path, its
/// conversation id); a Gemini AfterAgent payload names its session. Either
/// way the subagent transcripts beside the session come too.
#[test]
fn cursor_and_gemini_sessions_come_with_their_subagents() -> anyhow::Result<()> {
    let (_tmp, paths, ..) = device()?;
    const CURSOR: &str = "5b8e2d14-7a3c-4e91-b6f0-2c9d4a1e8f73";
    let transcripts = paths
        .cursor_dir
        .join("projects/home-sam-src-tally/agent-transcripts");
    let session = transcripts.join(format!("{CURSOR}.jsonl"));
    let subagent = transcripts.join(CURSOR).join("subagents/9c4f1a7e.jsonl");
    let chats = paths.gemini_dir.join("tmp/tally/chats");
    let gemini = chats.join("session-2026-05-13T09-14-7c1e4a2b.jsonl");
    let gemini_id = "7c1e4a2b-5d3f-4e6a-9b80-2f4d6c8a1e35";
    let gemini_sub = chats.join(gemini_id).join("b41d09e6.jsonl");
    for f in [&session, &subagent, &gemini, &gemini_sub] {
        fs::create_dir_all(f.parent().unwrap_or(Path::new("/")))?;
        fs::write(f, "{}\n")?;
    }
    fs::write(
        &gemini,
        format!("{{\"sessionId\":\"{gemini_id}\",\"kind\":\"main\"}}\n"),
    )?;
    let of = |runtime, path: &PathBuf| Source {
        runtime,
        path: path.clone(),
    };
    let cursor = vec![
        of(AgentRuntime::Cursor, &session),
        of(AgentRuntime::Cursor, &subagent),
    ];
    let common = r#""generation_id":"g1","hook_event_name":"stop","status":"completed","loop_count":0,"workspace_roots":["/home/sam/src/tally"]"#;
    let cases: Vec<(&str, String, Vec<Source>)> = vec![
        (
            "Cursor stop with its transcript path",
            format!(
                r#"{{"conversation_id":"{CURSOR}",{common},"transcript_path":"{}"}}"#,
                session.display()
            ),
            cursor.clone(),
        ),
        (
            "Cursor stop with a null path: found by conversation id",
            format!(r#"{{"conversation_id":"{CURSOR}",{common},"transcript_path":null}}"#),
            cursor.clone(),
        ),
        (
            "a conversation id that tries to leave the folder",
            format!(r#"{{"conversation_id":"../{CURSOR}",{common}}}"#),
            vec![],
        ),
        (
            "Gemini AfterAgent",
            format!(
                r#"{{"session_id":"{gemini_id}","transcript_path":"{}","hook_event_name":"AfterAgent"}}"#,
                gemini.display()
            ),
            vec![
                of(AgentRuntime::Gemini, &gemini),
                of(AgentRuntime::Gemini, &gemini_sub),
            ],
        ),
    ];
    for (what, stdin, want) in cases {
        assert_eq!(
            targets(&paths, None, None, stdin.as_bytes()),
            want,
            "{what}"
        );
    }
    Ok(())
}

#[test]
fn copilot_payloads_name_the_sessions_events_file() -> anyhow::Result<()> {
    let (_tmp, paths, ..) = device()?;
    const COPILOT: &str = "0c2d5e8a-41f7-4b3e-9a6d-7e1f2b8c4d90";
    let events = paths
        .copilot_dir
        .join("session-state")
        .join(COPILOT)
        .join("events.jsonl");
    fs::create_dir_all(events.parent().unwrap_or(Path::new("/")))?;
    fs::write(&events, "{}\n")?;
    // A file one level up that a hostile id would reach.
    let outside = paths.copilot_dir.join("events.jsonl");
    fs::write(&outside, "{}\n")?;
    let copilot = vec![Source {
        runtime: AgentRuntime::Copilot,
        path: events.clone(),
    }];
    let e = events.display();
    let cases: Vec<(&str, String, Vec<Source>)> = vec![
        (
            "agentStop as documented (github/docs PR 43876)",
            format!(
                r#"{{"timestamp":1704614750000,"cwd":"/home/sam/src/tally","sessionId":"{COPILOT}","transcriptPath":"{e}","stopReason":"end_turn"}}"#
            ),
            copilot.clone(),
        ),
        (
            "agentStop whose transcript path is elsewhere: the session's own events",
            format!(
                r#"{{"sessionId":"{COPILOT}","transcriptPath":"/tmp/elsewhere.jsonl","stopReason":"end_turn"}}"#
            ),
            copilot.clone(),
        ),
        (
            "sessionEnd with a snake_case id",
            format!(
                r#"{{"timestamp":1704618000000,"cwd":"/w","reason":"complete","session_id":"{COPILOT}"}}"#
            ),
            copilot.clone(),
        ),
        (
            "a transcript path alone",
            format!(r#"{{"timestamp":1,"transcriptPath":"{e}"}}"#),
            copilot.clone(),
        ),
        (
            "a session id that tries to leave the folder",
            r#"{"sessionId":"..","stopReason":"end_turn"}"#.into(),
            vec![],
        ),
        (
            "a session id that is a path",
            format!(r#"{{"sessionId":"../session-state/{COPILOT}"}}"#),
            vec![],
        ),
        (
            "sessionEnd without an id names nothing",
            r#"{"timestamp":1704618000000,"cwd":"/w","reason":"user_exit"}"#.into(),
            vec![],
        ),
    ];
    for (what, stdin, want) in cases {
        assert_eq!(
            targets(&paths, None, None, stdin.as_bytes()),
            want,
            "{what}"
        );
    }
    Ok(())
}

/// With the state held by another kith (a backfill), a hook naming several
/// transcripts waits for it once, not once for each (the agent waits on
/// the hook), and leaves them for the holder or the next hook.
#[test]
fn a_hook_waits_for_a_held_state_once() -> anyhow::Result<()> {
    let (_tmp, paths, session, subagent, _) = device()?;
    let settings = Settings {
        file: paths.config_dir.join("config.toml"),
        central_url: None,
        rules: crate::settings::Rules::default(),
        aider_roots: Vec::new(),
        path_map: Vec::new(),
    };
    let held = crate::config::Lock::state(&paths.state_dir, Duration::ZERO)?;
    capture_and_send(&paths, &settings, &[claude(&session), claude(&subagent)])?;
    drop(held);
    let log = fs::read_to_string(log_path(&paths))?;
    assert_eq!(log.matches("another kith is working").count(), 1, "{log}");
    assert!(Capture::new(&paths, LOCK_WAIT).outbox().is_empty());
    Ok(())
}
