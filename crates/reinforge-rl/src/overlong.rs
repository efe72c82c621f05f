//! Length penalties for over-long responses: verl's DAPO overlong buffer and TRL's soft overlong
//! punishment.

/// verl DAPO overlong penalty (`verl/workers/reward_manager/dapo.py` @ 1dda039,
/// `DAPORewardManager.__call__`): `min(-(len - (max_resp_len - buffer))/buffer · factor, 0)`, added
/// to the score. It has no floor (verl truncates responses, so `len <= max_resp_len` there).
pub fn verl_dapo_overlong_penalty(
    valid_response_length: usize,
    max_resp_len: usize,
    buffer_len: usize,
    penalty_factor: f64,
) -> f64 {
    let exceed = valid_response_length as f64 - (max_resp_len as f64 - buffer_len as f64);
    (-exceed / buffer_len as f64 * penalty_factor).min(0.0)
}

/// [`verl_dapo_overlong_penalty`] as verl evaluates it at runtime: the length is an int64
/// tensor, so the division happens in float32 (torch's default dtype), as does the product.
pub fn verl_dapo_overlong_penalty_f32(
    valid_response_length: usize,
    max_resp_len: usize,
    buffer_len: usize,
    penalty_factor: f64,
) -> f32 {
    let exceed = valid_response_length as i64 - (max_resp_len as i64 - buffer_len as i64);
    let v = (-exceed) as f32 / buffer_len as f32 * penalty_factor as f32;
    v.min(0.0)
}

/// TRL soft overlong punishment (`trl/rewards/other_rewards.py` @ f2cd577,
/// `get_soft_overlong_punishment`): 0 up to `max - cache`, then `(max - cache - len)/cache` down to
/// -1 at `max`, and -1 beyond. `cache = 0` is a hard step at `max`.
pub fn trl_soft_overlong_punishment(
    completion_length: usize,
    max_completion_len: usize,
    soft_punish_cache: usize,
) -> f64 {
    let (len, max, cache) = (
        completion_length as f64,
        max_completion_len as f64,
        soft_punish_cache as f64,
    );
    if len <= max - cache {
        0.0
    } else if len <= max {
        (max - cache - len) / cache
    } else {
        -1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verl_and_trl_shapes() {
        assert_eq!(verl_dapo_overlong_penalty(16, 20, 4, 1.0), 0.0);
        assert_eq!(verl_dapo_overlong_penalty(18, 20, 4, 1.0), -0.5);
        assert_eq!(verl_dapo_overlong_penalty(24, 20, 4, 1.0), -2.0, "no floor");
        assert_eq!(trl_soft_overlong_punishment(18, 20, 4), -0.5);
        assert_eq!(trl_soft_overlong_punishment(24, 20, 4), -1.0);
        assert_eq!(trl_soft_overlong_punishment(20, 20, 0), 0.0);
        assert_eq!(trl_soft_overlong_punishment(21, 20, 0), -1.0);
    }
}
