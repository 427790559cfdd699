//! Secret shapes planted where the agents write tool text (a Claude Code
//! tool result, a Codex `function_call`'s JSON-encoded `arguments` and its
//! `function_call_output`, plain and JSON-encoded, a pi tool result), and
//! text that must come through untouched in the same places.

use std::ops::Range;

use serde_json::{json, Value};

use super::redact_jsonl;

/// Where a transcript line carries text an agent's tool saw or ran.
#[derive(Debug, Clone, Copy)]
enum Place {
    ClaudeToolResult,
    /// JSON inside a JSON string: `"arguments": "{\"cmd\": \"…\"}"`.
    CodexArguments,
    CodexOutput,
    /// Older Codex: the output is itself JSON, so the text is escaped twice.
    CodexOutputJson,
    PiToolResult,
}

const PLACES: [Place; 5] = [
    Place::ClaudeToolResult,
    Place::CodexArguments,
    Place::CodexOutput,
    Place::CodexOutputJson,
    Place::PiToolResult,
];

/// The line (without its `\n`) that carries `text` at `place`.
fn plant(place: Place, text: &str) -> String {
    let line = match place {
        Place::ClaudeToolResult => json!({
            "type": "user",
            "message": {"role": "user", "content": [
                {"tool_use_id": "toolu_01VFxLsW8qYpJQ6QTdcqXw9c", "type": "tool_result", "content": text}
            ]},
            "uuid": "4d5611e5-241a-462a-8d15-5122611a9569",
        }),
        Place::CodexArguments => json!({
            "timestamp": "2026-05-11T08:27:22.479Z",
            "type": "response_item",
            "payload": {
                "type": "function_call",
                "name": "exec_command",
                "arguments": json!({"cmd": text, "workdir": "/home/me/proj", "max_output_tokens": 12000}).to_string(),
                "call_id": "call_Y2p6KmqwoTtpi6atpDPuxC5M",
            },
        }),
        Place::CodexOutput => json!({
            "timestamp": "2026-05-11T08:27:23.709Z",
            "type": "response_item",
            "payload": {"type": "function_call_output", "call_id": "call_Y2p6KmqwoTtpi6atpDPuxC5M", "output": text},
        }),
        Place::CodexOutputJson => json!({
            "timestamp": "2026-05-11T08:27:23.709Z",
            "type": "response_item",
            "payload": {
                "type": "function_call_output",
                "call_id": "call_Y2p6KmqwoTtpi6atpDPuxC5M",
                "output": json!({"output": text, "metadata": {"exit_code": 0, "duration_seconds": 0.1}}).to_string(),
            },
        }),
        Place::PiToolResult => json!({
            "type": "message",
            "timestamp": "2025-12-08T22:41:09.394Z",
            "message": {
                "role": "toolResult",
                "toolCallId": "toolu_012yuiPP1VAfh196GXaAmT8D",
                "toolName": "bash",
                "content": [{"type": "text", "text": text}],
                "isError": false,
            },
        }),
    };
    line.to_string()
}

/// The JSON string inside the line that must itself stay JSON.
fn inner_json(place: Place, line: &Value) -> Option<&str> {
    match place {
        Place::CodexArguments => line["payload"]["arguments"].as_str(),
        Place::CodexOutputJson => line["payload"]["output"].as_str(),
        _ => None,
    }
}

/// The byte ranges of every mask (`[REDACTED:kind]***` or `***`).
fn masks(text: &str) -> Vec<Range<usize>> {
    let mask = regex::Regex::new(r"\[REDACTED:[a-z0-9_]+\]\**|\*+").expect("constant pattern");
    mask.find_iter(text).map(|m| m.range()).collect()
}

/// Redacts `text` planted at `place` and checks: same length, still JSON
/// (and the JSON inside a string too), every byte of every occurrence of
/// each `secret` under a mask, nothing changed outside the masks, each
/// `keep` still there, and a secret kind counted.
fn check_masked(case: &str, place: Place, text: &str, secrets: &[&str], keep: &[&str]) {
    let line = plant(place, text);
    let out = redact_jsonl(format!("{line}\n").into_bytes());
    let redacted = out.text.strip_suffix('\n').unwrap_or(&out.text);
    let at = format!("{case} in {place:?}: {redacted}");
    assert_eq!(redacted.len(), line.len(), "length kept: {at}");
    let value: Value = serde_json::from_str(redacted).unwrap_or_else(|e| panic!("{e}: {at}"));
    if let Some(inner) = inner_json(place, &value) {
        assert!(
            serde_json::from_str::<Value>(inner).is_ok(),
            "inner JSON kept: {at}"
        );
    }
    let masks = masks(redacted);
    let masked = |r: Range<usize>| masks.iter().any(|m| m.start <= r.start && r.end <= m.end);
    for secret in secrets {
        assert!(line.contains(secret), "{case}: {secret} is planted as is");
        assert!(!redacted.contains(secret), "{secret} survived: {at}");
        for (i, _) in line.match_indices(secret) {
            assert!(
                masked(i..i + secret.len()),
                "{secret} not wholly masked: {at}"
            );
        }
    }
    for (i, (a, b)) in line.bytes().zip(redacted.bytes()).enumerate() {
        assert!(
            a == b || masked(i..i + 1),
            "changed outside a mask at {i}: {at}"
        );
    }
    for kept in keep.iter().chain(&["BEFORE-MARK", "AFTER-MARK"]) {
        assert!(line.contains(kept), "{case}: {kept} is planted as is");
        assert!(redacted.contains(kept), "{kept} lost: {at}");
    }
    let found: u64 = out
        .counts
        .iter()
        .filter(|(kind, _)| !kind.starts_with("invalid_"))
        .map(|(_, n)| n)
        .sum();
    assert!(found >= 1, "nothing counted: {at} {:?}", out.counts);
}

struct Shape {
    name: &'static str,
    text: &'static str,
    /// Every one must be masked wholly (written as they appear in the line:
    /// no quotes, backslashes or control characters).
    secrets: &'static [&'static str],
    /// Text next to the secrets that must survive.
    keep: &'static [&'static str],
}

const SHAPES: &[Shape] = &[
    Shape {
        name: "aws access key id in ~/.aws/credentials",
        text: "[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\nregion = eu-west-1",
        secrets: &["AKIAIOSFODNN7EXAMPLE"],
        keep: &["aws_access_key_id = ", "region = eu-west-1"],
    },
    Shape {
        name: "aws secret in ~/.aws/credentials",
        text: "[default]\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\nregion = eu-west-1",
        secrets: &["wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"],
        keep: &["aws_secret_access_key = ", "region = eu-west-1"],
    },
    Shape {
        name: "aws secret in env",
        text: "export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        secrets: &["wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"],
        keep: &["export AWS_SECRET_ACCESS_KEY="],
    },
    Shape {
        name: "aws sts JSON output",
        text: "{\n  \"Credentials\": {\n    \"AccessKeyId\": \"ASIAY34FZKBOKMUTVV7A\",\n    \"SecretAccessKey\": \"9drTJvcXLB89EXAMPLELB8923FB892xMFI\",\n    \"SessionToken\": \"AQoXdzELDDY//////////wEaoAK1wvxJY12r2IrDFT2IvAzTCn3zHoZ7YNtpiQLVnGEXAMPLE\"\n  }\n}",
        secrets: &[
            "ASIAY34FZKBOKMUTVV7A",
            "9drTJvcXLB89EXAMPLELB8923FB892xMFI",
            "AQoXdzELDDY",
            "wEaoAK1wvxJY12r2IrDFT2IvAzTCn3zHoZ7YNtpiQLVnGEXAMPLE",
        ],
        keep: &["Credentials", "AccessKeyId", "SecretAccessKey", "SessionToken"],
    },
    Shape {
        name: "github classic token",
        text: "gh auth login --with-token <<< ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        secrets: &["ghp_abcdefghijklmnopqrstuvwxyz0123456789"],
        keep: &["gh auth login --with-token"],
    },
    Shape {
        name: "github oauth token in hosts.yml",
        text: "github.com:\n    user: octocat\n    oauth_token: gho_abcdefghijklmnopqrstuvwxyz0123456789",
        secrets: &["gho_abcdefghijklmnopqrstuvwxyz0123456789"],
        keep: &["user: octocat", "oauth_token: "],
    },
    Shape {
        name: "github fine-grained token",
        text: "GH_TOKEN=github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV gh pr list",
        secrets: &["github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV"],
        keep: &["GH_TOKEN=", "gh pr list"],
    },
    Shape {
        name: "gitlab personal access token",
        text: "git clone https://oauth2:glpat-xY9zAbCdEf1234567890@gitlab.com/group/repo.git",
        secrets: &["glpat-xY9zAbCdEf1234567890"],
        keep: &["git clone https://oauth2:", "@gitlab.com/group/repo.git"],
    },
    Shape {
        name: "slack bot token",
        text: "slack.WebClient(token=xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOpQrStUvWx)",
        secrets: &["xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOpQrStUvWx"],
        keep: &["slack.WebClient(token="],
    },
    Shape {
        name: "stripe live key",
        text: "stripe.api_key = \"sk_live_4eC39HqLyjWDarjtT1zdp7dc\"",
        secrets: &["sk_live_4eC39HqLyjWDarjtT1zdp7dc"],
        keep: &["stripe.api_key = "],
    },
    Shape {
        name: "openai project key",
        text: "OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD python app.py",
        secrets: &["sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD"],
        keep: &["OPENAI_API_KEY=", "python app.py"],
    },
    Shape {
        name: "openai legacy key in code",
        text: "client = OpenAI(api_key=\"sk-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7dEf0hIj3kLm6n\")",
        secrets: &["sk-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7dEf0hIj3kLm6n"],
        keep: &["client = OpenAI(api_key="],
    },
    Shape {
        name: "anthropic key in a header",
        text: "curl https://api.anthropic.com/v1/messages -H 'x-api-key: sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_AbCdEfGhIj'",
        secrets: &["sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_AbCdEfGhIj"],
        keep: &["curl https://api.anthropic.com/v1/messages -H", "x-api-key: "],
    },
    Shape {
        name: "google api key in a URL",
        text: "GET https://maps.googleapis.com/maps/api/geocode/json?address=Berlin&key=AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
        secrets: &["AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"],
        keep: &["address=Berlin&key="],
    },
    Shape {
        name: "jwt in a cookie",
        text: "Cookie: session=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U; theme=dark",
        secrets: &["eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"],
        keep: &["Cookie: session=", "theme=dark"],
    },
    Shape {
        name: "private key with its BEGIN line",
        text: "cat ~/.ssh/id_rsa\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1x2y3zAbCdEf\nQWERTYasdfgh0987\n-----END RSA PRIVATE KEY-----",
        secrets: &["MIIEpAIBAAKCAQEA1x2y3zAbCdEf", "QWERTYasdfgh0987"],
        keep: &["cat ~/.ssh/id_rsa"],
    },
    Shape {
        name: "private key body without its BEGIN line",
        text: "tail -3 server.key\nk3Lm9Qr2St5Uv8Wx1Yz4Ab7Cd0Ef3Gh6Ij9Kl2Mn5Op8Qr1St4Uv7Wx0Yz3Ab6Cd\nZz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp==\n-----END PRIVATE KEY-----",
        secrets: &[
            "k3Lm9Qr2St5Uv8Wx1Yz4Ab7Cd0Ef3Gh6Ij9Kl2Mn5Op8Qr1St4Uv7Wx0Yz3Ab6Cd",
            "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp==",
        ],
        keep: &["tail -3 server"],
    },
    Shape {
        name: "private key body without BEGIN or END line",
        text: "head -3 key.pem | tail -2\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\nMzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n",
        secrets: &[
            "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj",
            "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu",
        ],
        keep: &["head -3 key.pem | tail -2"],
    },
    Shape {
        name: "openssh key body without its BEGIN line",
        text: "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\nQyNTUxOQAAACBxyzExampleKeyMaterial0123456789abcdefghij",
        secrets: &[
            "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW",
            "QyNTUxOQAAACBxyzExampleKeyMaterial0123456789abcdefghij",
        ],
        keep: &[],
    },
    Shape {
        name: "https URL with user and password",
        text: "git clone https://bob:hunter2secret@example.com/repo.git",
        secrets: &["hunter2secret"],
        keep: &["git clone https://bob:", "@example.com/repo.git"],
    },
    Shape {
        name: "redis URL with an empty user",
        text: "REDIS_URL=redis://:p4ssw0rdRedis@cache.internal:6379/0",
        secrets: &["p4ssw0rdRedis"],
        keep: &["REDIS_URL=redis://:", "@cache.internal:6379/0"],
    },
    Shape {
        name: "postgres URL",
        text: "psql postgresql://app:S3cr3tPass@db:5432/app -c 'select 1'",
        secrets: &["S3cr3tPass"],
        keep: &["psql postgresql://app:", "@db:5432/app"],
    },
    Shape {
        name: "basic authorization header",
        text: "curl -H 'Authorization: Basic dXNlcjpodW50ZXIy' https://api.example.com/v1/me",
        secrets: &["dXNlcjpodW50ZXIy"],
        keep: &["Authorization: Basic ", "https://api.example.com/v1/me"],
    },
    Shape {
        name: "bearer authorization header",
        text: "curl -H \"Authorization: Bearer 0b79bab50daca910b000d4f1a2b675d604257e42\" https://api.example.com/v1/me",
        secrets: &["0b79bab50daca910b000d4f1a2b675d604257e42"],
        keep: &["Authorization: Bearer ", "https://api.example.com/v1/me"],
    },
    Shape {
        name: "lower-case bearer header",
        text: "> authorization: bearer 8c5f1e9a2b7d4c6e0f3a\n< HTTP/1.1 200 OK",
        secrets: &["8c5f1e9a2b7d4c6e0f3a"],
        keep: &["authorization: bearer ", "HTTP/1.1 200 OK"],
    },
    Shape {
        name: "password= in a dotenv file",
        text: "host=db.internal\npassword=hunter2xyz\nport=5432",
        secrets: &["hunter2xyz"],
        keep: &["host=db.internal", "password=", "port=5432"],
    },
    Shape {
        name: "passwd= assignment",
        text: "ftp_passwd=Tr0ub4dor3 ./sync.sh",
        secrets: &["Tr0ub4dor3"],
        keep: &["ftp_passwd=", "./sync.sh"],
    },
    Shape {
        name: "secret= assignment",
        text: "secret=qwerty12345 node server.js",
        secrets: &["qwerty12345"],
        keep: &["secret=", "node server.js"],
    },
    Shape {
        name: "token= in a query string",
        text: "curl 'https://api.example.com/v1/items?token=a1b2c3d4e5f6&limit=10'",
        secrets: &["a1b2c3d4e5f6"],
        keep: &["/v1/items?token=", "&limit=10"],
    },
    Shape {
        name: "api_key= CLI flag",
        text: "python run.py --api_key=9f8e7d6c5b4a --verbose",
        secrets: &["9f8e7d6c5b4a"],
        keep: &["python run.py --api_key=", "--verbose"],
    },
    Shape {
        name: "password CLI flag and its value",
        text: "mysql -u root --password Tr0ub4dor3x shop",
        secrets: &["Tr0ub4dor3x"],
        keep: &["mysql -u root --password ", " shop"],
    },
    Shape {
        name: "DB_PASS in env",
        text: "DB_HOST=localhost DB_PASS=pg-s3cret-99 ./migrate",
        secrets: &["pg-s3cret-99"],
        keep: &["DB_HOST=localhost DB_PASS=", "./migrate"],
    },
    Shape {
        name: "quoted env value",
        text: "export API_TOKEN=\"tok-9a8b7c6d5e\" && ./deploy.sh",
        secrets: &["tok-9a8b7c6d5e"],
        keep: &["export API_TOKEN=", "./deploy.sh"],
    },
    Shape {
        name: "single-quoted passphrase with a space",
        text: "export DB_PASSWORD='p@ss w0rd!' && psql",
        secrets: &["p@ss w0rd!"],
        keep: &["export DB_PASSWORD=", "&& psql"],
    },
    Shape {
        name: "YAML password",
        text: "database:\n  user: app\n  password: hunter2yaml\n  host: db",
        secrets: &["hunter2yaml"],
        keep: &["user: app", "password: ", "host: db"],
    },
    Shape {
        name: "YAML password without digits",
        text: "smtp:\n  password: supersecretvalue\n  port: 587",
        secrets: &["supersecretvalue"],
        keep: &["password: ", "port: 587"],
    },
    Shape {
        name: "JSON password",
        text: "{\"username\": \"app\", \"password\": \"correct horse battery staple\"}",
        secrets: &["correct horse battery staple"],
        keep: &["username", "app", "password"],
    },
    Shape {
        name: "python dict password",
        text: "config = {'user': 'app', 'password': 'Sup3rS3cret!'}",
        secrets: &["Sup3rS3cret!"],
        keep: &["config = {", "'user': 'app', 'password': '"],
    },
    Shape {
        name: "npm token in .npmrc",
        text: "//registry.npmjs.org/:_authToken=npm_abcdefghijklmnopqrstuvwxyz0123456789",
        secrets: &["npm_abcdefghijklmnopqrstuvwxyz0123456789"],
        keep: &["//registry.npmjs.org/:_authToken="],
    },
    Shape {
        name: "legacy npm token in .npmrc",
        text: "//registry.npmjs.org/:_authToken=5f3c2a1b-9d8e-4f7a-b6c5-d4e3f2a1b0c9",
        secrets: &["5f3c2a1b-9d8e-4f7a-b6c5-d4e3f2a1b0c9"],
        keep: &["//registry.npmjs.org/:_authToken="],
    },
    Shape {
        name: "twilio auth token and api key sid",
        text: "TWILIO_AUTH_TOKEN=0123456789abcdef0123456789abcdef\nTWILIO_API_KEY_SID=SK0123456789abcdef0123456789abcdef",
        secrets: &["0123456789abcdef0123456789abcdef"],
        keep: &["TWILIO_AUTH_TOKEN=", "TWILIO_API_KEY_SID="],
    },
    Shape {
        name: "sendgrid key",
        text: "sg = SendGridAPIClient('SG.aBcDeFgHiJkLmNoPqRsTuV.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_AbCdE')",
        secrets: &["SG.aBcDeFgHiJkLmNoPqRsTuV.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_AbCdE"],
        keep: &["sg = SendGridAPIClient("],
    },
    Shape {
        name: "heroku api key",
        text: "HEROKU_API_KEY=01234567-89ab-cdef-0123-456789abcdef heroku apps",
        secrets: &["01234567-89ab-cdef-0123-456789abcdef"],
        keep: &["HEROKU_API_KEY=", "heroku apps"],
    },
    Shape {
        name: "heroku platform token",
        text: "heroku authorizations:create => HRKU-AbCdEfGhIj0123456789AbCdEfGhIj0123456789AbCdEfGhIj0123456789",
        secrets: &["HRKU-AbCdEfGhIj0123456789AbCdEfGhIj0123456789AbCdEfGhIj0123456789"],
        keep: &["heroku authorizations:create =>"],
    },
    Shape {
        name: "azure storage connection string",
        text: "DefaultEndpointsProtocol=https;AccountName=mystore;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;EndpointSuffix=core.windows.net",
        secrets: &["Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="],
        keep: &["AccountName=mystore;AccountKey=", ";EndpointSuffix=core.windows.net"],
    },
    Shape {
        name: "azure service bus connection string",
        text: "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZg=",
        secrets: &["Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZg="],
        keep: &["SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey="],
    },
    Shape {
        name: "hugging face token",
        text: "huggingface-cli login --token hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh",
        secrets: &["hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"],
        keep: &["huggingface-cli login --token "],
    },
    Shape {
        name: "random key in prose",
        text: "the key is Xk9pQ2mLz8RvT4wYb7NcJ1sHd6FgUa3E, keep it",
        secrets: &["Xk9pQ2mLz8RvT4wYb7NcJ1sHd6FgUa3E"],
        keep: &["the key is ", ", keep it"],
    },
];

/// Every shape, in every place: masked wholly, nothing else touched.
#[test]
fn every_secret_shape_is_masked_in_every_agents_lines() {
    assert!(SHAPES.len() >= 30, "{}", SHAPES.len());
    for shape in SHAPES {
        let text = format!("echo BEFORE-MARK\n{}\necho AFTER-MARK", shape.text);
        for place in PLACES {
            check_masked(shape.name, place, &text, shape.secrets, shape.keep);
        }
    }
}

/// Text that looks a little like a secret and is not one.
const ORDINARY: &[(&str, &str)] = &[
    ("ipfs CIDv0", "ipfs cat QmYwAPJzv5CZsnA625s3Xf2nemtYgPpHdWEz79ojWnPbdG"),
    ("ipfs URL", "open ipfs://QmT78zSuBmuS4z925WZfrqQ1qHaJ56DQaTfyMUF7F8ff5o/readme"),
    ("ipfs CIDv1 base58", "pinned zdj7WWeQ43G6JJvLWQWZpyHuAMq6uYWRjkBXFad11vE2LHhQ7"),
    ("ipfs CIDv1 base32", "https://bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi.ipfs.dweb.link/"),
    ("git SHA", "commit 8cc42b0bd39d04e71e509d7d58e6782ab435329f fixed it"),
    ("sha256", "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
    ("UUID", "session 4d5611e5-241a-462a-8d15-5122611a9569"),
    ("path", "/Users/Alice/Projects/App2024/src/Components/UserProfile9Card.tsx"),
    ("long identifier", "getUserAccountSettingsForTenant2024AndRegion5 and test_parse_claude_code_transcript_with_subagents_v2_fixture"),
    ("agent ids", "toolu_01VFxLsW8qYpJQ6QTdcqXw9c agent_msg_01LkKqpUD829m724o5oSeN7M call_Y2p6KmqwoTtpi6atpDPuxC5M"),
    ("password in prose", "If you forgot it, reset your password from the settings page; a password must have 12 characters."),
    ("password label in prose", "Password: must be at least 12 characters long"),
    ("token in prose", "Each token costs money, and the token limit is 200k tokens."),
    ("token counts in usage JSON", "{\"usage\": {\"input_tokens\": 123, \"output_tokens\": 4567, \"cache_read_input_tokens\": 890123}}"),
    ("max tokens flag", "llm --max-tokens=1000000 --max_output_tokens 12000"),
    ("password policy constant", "PASSWORD_MIN_LENGTH = 8"),
    ("placeholder env", "export GITHUB_TOKEN=$GITHUB_TOKEN API_KEY=${{ secrets.API_KEY }} OPENAI_API_KEY=sk-..."),
    ("redacted placeholder", "apiKey: 'REDACTED_API_KEY', 'authorization': 'Bearer REDACTED_TOKEN'"),
    ("code reading a token", "const token = await getToken();\nself.api_key = api_key\npassword = request.form[\"password\"]"),
    ("code with member paths", "const apiKey = options?.apiKey || getKey()\napiKey: process.env.OPENAI_API_KEY,\ntoken: config.auth.token,"),
    ("type annotations", "password: string;\ntoken: String,\ndef login(username: str, password: str):\nconst credentials: OAuthCredentials = {"),
    ("a comparison", "if password == confirm_password:\n    return True"),
    ("password-stdin", "echo $TOKEN | docker login --password-stdin -u me ghcr.io"),
    ("a word as a key's value", "env.CODEMIE_API_KEY = 'proxy-handled';\n  params: { _csrf_token: csrfToken },"),
    ("certificate", "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJ\n-----END CERTIFICATE-----"),
    ("ssh public key", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me@host"),
    ("URL without a password", "postgres://user:password@localhost:5432/db and https://example.com/docs/page?id=42"),
    ("integrity hash", "integrity sha512-Q8mJ3xLp9Rt2Vw5Yz1Bc4Df7Gh0Jk3Lm6Np9Qr2St5Uv8Wx1Yz4Ab7Cd0Ef3Gh6Ij9Kl2Mn5Op8Qr1St4Uv7Wx0=="),
];

/// Base64 of `n` bytes from a fixed-seed generator: an inline image.
fn base64_image(n: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let bytes: Vec<u8> = (0..n)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 32) as u8
        })
        .collect();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let v = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(v >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Nothing in `ORDINARY`, and no inline image, is touched, in any place.
///
/// Base64 image data passes through: it is not a secret, it is large in
/// transcripts, and its runs of letters are glued to `+`, `/` and `=`,
/// which the high-entropy rule does not cut from. A private key's base64 is
/// found by its DER header or its END line, never for being base64.
#[test]
fn ordinary_text_is_left_alone_in_every_agents_lines() {
    let image = format!("data:image/png;base64,{}", base64_image(6000));
    let cases = ORDINARY
        .iter()
        .map(|(name, text)| (*name, (*text).to_owned()))
        .chain([("base64 image", image)]);
    for (name, text) in cases {
        for place in PLACES {
            let line = plant(place, &text);
            let out = redact_jsonl(format!("{line}\n").into_bytes());
            assert!(
                out.counts.is_empty(),
                "{name} in {place:?}: {:?}",
                out.counts
            );
            assert_eq!(out.text, format!("{line}\n"), "{name} in {place:?}");
        }
    }
}

/// A line's own `"name": "value"` pairs (key and value are two strings of
/// the line, not text inside one): the value is masked whole.
#[test]
fn a_lines_own_secret_fields_are_masked() {
    let cases: &[(&str, &str, &str)] = &[
        (
            r#"{"password":"correct horse battery"}"#,
            "correct horse battery",
            "secret_field",
        ),
        (
            r#"{"env":{"SecretAccessKey": "9drTJvcXLB89EXAMPLELB8923FB892xMFI"}}"#,
            "9drTJvcXLB89",
            "secret_field",
        ),
        (
            r#"{"headers":{"Authorization":"Basic dXNlcjpodW50ZXIy"}}"#,
            "dXNlcjpodW50ZXIy",
            "auth_header",
        ),
    ];
    for (line, secret, kind) in cases {
        let out = redact_jsonl(format!("{line}\n").into_bytes());
        assert!(!out.text.contains(secret), "{}", out.text);
        assert_eq!(out.text.len(), line.len() + 1);
        assert!(
            serde_json::from_str::<Value>(&out.text).is_ok(),
            "{}",
            out.text
        );
        assert_eq!(out.counts.get(*kind), Some(&1), "{line}: {:?}", out.counts);
    }
    // The scheme stays readable; the name of a non-secret stays whole.
    let out = redact_jsonl(br#"{"Authorization":"Bearer 0b79bab50daca910b000d4f1a2b675d6","token_type":"bearer","input_tokens":12}"#.to_vec());
    assert!(
        out.text
            .starts_with(r#"{"Authorization":"Bearer [REDACTED:auth_header]"#),
        "{}",
        out.text
    );
    assert!(
        out.text
            .ends_with(r#""token_type":"bearer","input_tokens":12}"#),
        "{}",
        out.text
    );
    // Placeholders and words are not secrets.
    for line in [
        r#"{"password":"REDACTED"}"#,
        r#"{"apiKey":"proxy-handled"}"#,
        r#"{"token":""}"#,
        r#"{"authorization":"Bearer ${TOKEN}"}"#,
    ] {
        let out = redact_jsonl(line.as_bytes().to_vec());
        assert!(out.counts.is_empty(), "{line}: {:?}", out.counts);
    }
}

/// Which whole keys name a secret: the keyword ends the key, after a
/// separator, at its start or as a camelCase word.
#[test]
fn secret_names_are_told_from_other_names() {
    for name in [
        "password",
        "DB_PASSWORD",
        "spring.datasource.password",
        "aws_secret_access_key",
        "SecretAccessKey",
        "SessionToken",
        "X-Api-Key",
        "apiKey",
        "client_secret",
        "_authToken",
        "AccountKey",
        "credentials",
    ] {
        assert!(super::is_secret_name(name.as_bytes()), "{name}");
    }
    for name in [
        "input_tokens",
        "token_type",
        "tokenizer",
        "bypass",
        "password_file",
        "secretName",
        "accessKeyId",
        "mytoken",
        "password_",
        "pass word",
        "",
    ] {
        assert!(!super::is_secret_name(name.as_bytes()), "{name}");
    }
}
