//! Checkpoints: `save_weights`, `load_weights` (into a model, or creating one),
//! `save_weights_for_sampler` (snapshots), the checkpoint list, `tinker://` paths.

use std::path::PathBuf;
use std::time::SystemTime;

use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{
    bad, check_base_model, check_pending, future, model_session, not_found, register_model,
    service, Answer,
};
use crate::error::{ApiError, ApiJson};
use crate::tinker::backend::Weights;
use crate::tinker::state::{Checkpoint, Failure, Payload, Sampler, Tinker};
use crate::AppState;

/// A checkpoint name: letters, digits, `-`, `_`, `.` (not only dots), so it stays one path
/// component under the checkpoint directory.
fn checkpoint_name(name: &str, field: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && !name.chars().all(|c| c == '.');
    if ok {
        Ok(())
    } else {
        Err(bad(
            field,
            format!("`{name}` is not a checkpoint name (letters, digits, '-', '_', '.')"),
        ))
    }
}

#[derive(Deserialize)]
pub struct SaveWeights {
    model_id: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    overwrite: bool,
}

/// `POST /api/v1/save_weights`: `tinker://<model_id>/weights/<path>` (the full checkpoint,
/// plus the adapter with LoRA, under the checkpoint directory).
pub async fn save_weights(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<SaveWeights>,
) -> Answer {
    let t = service(&state)?;
    let session = model_session(&t, &req.model_id)?;
    let name = match req.path {
        Some(p) => p,
        None => {
            let n = t.checkpoints(&req.model_id).map_or(0, |c| c.len());
            format!("{n:06}")
        }
    };
    checkpoint_name(&name, "path")?;
    let checkpoint_id = format!("weights/{name}");
    let dir = t
        .config
        .checkpoint_dir
        .join(&req.model_id)
        .join("weights")
        .join(&name);
    if dir.exists() && !req.overwrite {
        return Err(bad(
            "path",
            format!("checkpoint `{checkpoint_id}` exists (overwrite=true replaces it)"),
        ));
    }
    check_checkpoint_room(&t, &req.model_id, &checkpoint_id)?;
    check_pending(&t, &session)?;
    let (tc, model_id) = (t.clone(), req.model_id.clone());
    let id = t.submit(
        Some(session),
        Box::new(move |b| {
            b.save(&model_id, &dir, true).map_err(Failure::server)?;
            record_checkpoint(&tc, &model_id, &checkpoint_id, "training", dir);
            Ok(Payload::Json(json!({
                "path": format!("tinker://{model_id}/{checkpoint_id}"),
                "type": "save_weights",
            })))
        }),
    );
    Ok(future(id, Some(&req.model_id)))
}

/// 400 when `model_id` holds `max_checkpoints_per_model` checkpoints and `checkpoint_id` is
/// not one of them (replacing one adds none). Saves still queued are not counted yet: a
/// model holds at most the limit plus its session's queued requests.
fn check_checkpoint_room(t: &Tinker, model_id: &str, checkpoint_id: &str) -> Result<(), ApiError> {
    let held = t.checkpoints(model_id).unwrap_or_default();
    let limit = t.config.max_checkpoints_per_model;
    if held.len() < limit || held.iter().any(|c| c.checkpoint_id == checkpoint_id) {
        return Ok(());
    }
    Err(bad(
        "path",
        format!(
            "model `{model_id}` holds {} checkpoints, the server's limit per model; save under \
             an existing name with overwrite=true",
            held.len()
        ),
    ))
}

/// Adds (or replaces) a checkpoint in `model_id`'s list.
fn record_checkpoint(
    t: &Tinker,
    model_id: &str,
    checkpoint_id: &str,
    kind: &'static str,
    path: PathBuf,
) {
    if let Some(m) = t.store().models.get_mut(model_id) {
        m.checkpoints.retain(|c| c.checkpoint_id != checkpoint_id);
        m.checkpoints.push(Checkpoint {
            checkpoint_id: checkpoint_id.to_string(),
            kind,
            time: SystemTime::now(),
            path,
        });
    }
}

/// A `tinker://<model_id>/<kind>/<name>` path split, or a 400 naming `field`.
pub(super) fn tinker_path<'a>(
    path: &'a str,
    field: &str,
) -> Result<(&'a str, &'a str, &'a str), ApiError> {
    let parts: Vec<&str> = path
        .strip_prefix("tinker://")
        .unwrap_or_default()
        .split('/')
        .collect();
    match parts.as_slice() {
        [model, kind, name] if !model.is_empty() && !name.is_empty() => Ok((model, kind, name)),
        _ => Err(bad(
            field,
            format!("`{path}` is not a tinker://<model_id>/weights/<name> path"),
        )),
    }
}

#[derive(Deserialize)]
pub struct LoadWeights {
    #[serde(default)]
    model_id: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    model_seq_id: Option<u64>,
    #[serde(default)]
    base_model: Option<String>,
    path: String,
    #[serde(default)]
    optimizer: bool,
}

/// `POST /api/v1/load_weights`: a training checkpoint of this server into an existing model
/// (`model_id`, `load_state`), or into a new one (`session_id` + `model_seq_id`:
/// `create_training_client_from_state`, whose model id the SDK derives as
/// `<session_id>:train:<model_seq_id>`, `service_client.py`). With `optimizer: true`
/// (`load_state_with_optimizer`, `create_training_client_from_state_with_optimizer`) the
/// optimizer's state saved with the weights is restored too; without, it restarts.
pub async fn load_weights(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<LoadWeights>,
) -> Answer {
    let t = service(&state)?;
    let (source, kind, name) = tinker_path(&req.path, "path")?;
    if kind != "weights" {
        return Err(bad(
            "path",
            "load_weights takes a training checkpoint (tinker://<model_id>/weights/<name>)",
        ));
    }
    let checkpoint = t
        .checkpoints(source)
        .and_then(|c| {
            c.into_iter()
                .find(|c| c.checkpoint_id == format!("weights/{name}"))
        })
        .ok_or_else(|| not_found(format!("no checkpoint `{}`", req.path)))?;
    let (model_id, session, create) = match (&req.model_id, &req.session_id, req.model_seq_id) {
        (Some(m), None, _) => (m.clone(), model_session(&t, m)?, false),
        (None, Some(session), Some(seq)) => {
            if let Some(b) = &req.base_model {
                check_base_model(&t, b, "base_model")?;
            }
            let rank = t.store().models.get(source).and_then(|m| m.lora_rank);
            let id = register_model(&t, session, rank, Some(format!("{session}:train:{seq}")))?;
            (id, session.clone(), true)
        }
        _ => {
            return Err(bad(
                "model_id",
                "give model_id, or session_id and model_seq_id (create from the checkpoint)",
            ))
        }
    };
    check_pending(&t, &session)?;
    let (m, path, optimizer) = (model_id.clone(), req.path.clone(), req.optimizer);
    let id = t.submit(
        Some(session),
        Box::new(move |b| {
            if create {
                b.create_model(&m, None).map_err(Failure::server)?;
            }
            b.load(&m, &checkpoint.path, optimizer)
                .map_err(Failure::server)?;
            Ok(Payload::Json(
                json!({"path": path, "model_id": m, "type": "load_weights"}),
            ))
        }),
    );
    Ok(future(id, Some(&model_id)))
}

#[derive(Deserialize)]
pub struct SaveForSampler {
    model_id: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    kind: Option<String>,
}

/// `POST /api/v1/save_weights_for_sampler`: a snapshot of the current weights to sample from.
/// Named (`path`): also written to disk as `tinker://<model_id>/sampler_weights/<path>`;
/// unnamed: a sampling session on the snapshot (`save_weights_and_get_sampling_client`).
/// Only the newest `max_snapshots_per_model` snapshots of a model are kept.
pub async fn save_weights_for_sampler(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<SaveForSampler>,
) -> Answer {
    let t = service(&state)?;
    let session = model_session(&t, &req.model_id)?;
    if req.kind.as_deref().is_some_and(|k| k != "snapshot") {
        return Err(bad(
            "kind",
            "only `snapshot` sampling clients are supported",
        ));
    }
    if let Some(p) = &req.path {
        checkpoint_name(p, "path")?;
        check_checkpoint_room(&t, &req.model_id, &format!("sampler_weights/{p}"))?;
    }
    check_pending(&t, &session)?;
    let snapshot = t.store().fresh("sampler");
    let (tc, model_id, name) = (t.clone(), req.model_id.clone(), req.path.clone());
    let dir = name.as_ref().map(|n| {
        t.config
            .checkpoint_dir
            .join(&req.model_id)
            .join("sampler_weights")
            .join(n)
    });
    let id = t.submit(
        Some(session.clone()),
        Box::new(move |b| {
            b.snapshot(&model_id, &snapshot).map_err(Failure::server)?;
            let evicted = keep_snapshot(&tc, &model_id, &session, &snapshot);
            for old in evicted {
                b.drop_model(&old);
            }
            match (name, dir) {
                (Some(name), Some(dir)) => {
                    b.save(&model_id, &dir, false).map_err(Failure::server)?;
                    let checkpoint_id = format!("sampler_weights/{name}");
                    record_checkpoint(&tc, &model_id, &checkpoint_id, "sampler", dir);
                    let path = format!("tinker://{model_id}/{checkpoint_id}");
                    tc.store().sampler_paths.insert(path.clone(), snapshot);
                    Ok(Payload::Json(
                        json!({"path": path, "type": "save_weights_for_sampler"}),
                    ))
                }
                _ => Ok(Payload::Json(json!({
                    "sampling_session_id": snapshot,
                    "type": "save_weights_for_sampler",
                }))),
            }
        }),
    );
    Ok(future(id, Some(&req.model_id)))
}

/// Registers snapshot `id` of `model_id` as a sampling session; returns the snapshots evicted
/// beyond the per-model limit (their sessions and paths are gone).
fn keep_snapshot(t: &Tinker, model_id: &str, session: &str, id: &str) -> Vec<String> {
    let mut s = t.store();
    s.samplers.insert(
        id.to_string(),
        Sampler {
            session: session.to_string(),
            weights: Weights::Snapshot(id.to_string()),
            model_path: None,
        },
    );
    let Some(m) = s.models.get_mut(model_id) else {
        return vec![];
    };
    m.snapshots.push(id.to_string());
    let excess = m
        .snapshots
        .len()
        .saturating_sub(t.config.max_snapshots_per_model);
    let evicted: Vec<String> = m.snapshots.drain(..excess).collect();
    for old in &evicted {
        s.samplers
            .retain(|_, x| x.weights != Weights::Snapshot(old.clone()));
        s.sampler_paths.retain(|_, v| v != old);
    }
    evicted
}

/// GET `/api/v1/training_runs/{model_id}/checkpoints`.
pub async fn list_checkpoints(State(state): State<AppState>, Path(id): Path<String>) -> Answer {
    let t = service(&state)?;
    let list = t
        .checkpoints(&id)
        .ok_or_else(|| not_found(format!("no model `{id}`")))?;
    let checkpoints: Vec<Value> = list
        .iter()
        .map(|c| {
            json!({
                "checkpoint_id": c.checkpoint_id,
                "checkpoint_type": c.kind,
                "time": rfc3339(c.time),
                "tinker_path": format!("tinker://{id}/{}", c.checkpoint_id),
            })
        })
        .collect();
    Ok(Json(json!({"checkpoints": checkpoints})))
}

/// `time` as RFC 3339 UTC (`2026-11-27T12:00:00Z`), what pydantic's `datetime` parses.
fn rfc3339(time: SystemTime) -> String {
    let secs = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn dates_and_names() {
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        assert_eq!(rfc3339(t), "2026-11-18T11:06:40Z");
        assert!(checkpoint_name("step-2.final", "p").is_ok());
        for bad_name in ["", "..", "a/b", "x y"] {
            assert!(checkpoint_name(bad_name, "p").is_err(), "{bad_name}");
        }
        assert_eq!(
            tinker_path("tinker://model_3/weights/002", "p").unwrap(),
            ("model_3", "weights", "002")
        );
        assert!(tinker_path("tinker://model_3/weights", "p").is_err());
        assert!(tinker_path("s3://x/weights/1", "p").is_err());
    }
}
