//! Topic settings on the command line: `--config KEY=VALUE` with Kafka's topic-config names, and
//! the settings of a topic that differ from Kafka's defaults (what `topics list` and `describe`
//! print).

use std::collections::BTreeMap;

use anyhow::Context;
use seglog::config::LogConfig;

/// The default configuration with each `KEY=VALUE` applied in order.
pub fn parse_configs(settings: &[String]) -> anyhow::Result<LogConfig> {
    let mut config = LogConfig::default();
    apply_settings(settings, |key, value| config.set(key, value))?;
    Ok(config)
}

/// Applies each `--config KEY=VALUE` of `settings` in order with `set` (keys and values
/// trimmed); the first malformed or refused one is the error.
pub fn apply_settings<E>(
    settings: &[String],
    mut set: impl FnMut(&str, &str) -> Result<(), E>,
) -> anyhow::Result<()>
where
    E: std::error::Error + Send + Sync + 'static,
{
    for setting in settings {
        let (key, value) = setting
            .split_once('=')
            .with_context(|| format!("--config {setting:?} is not KEY=VALUE"))?;
        set(key.trim(), value.trim()).with_context(|| format!("invalid --config {setting:?}"))?;
    }
    Ok(())
}

/// The settings of `config` that differ from Kafka's defaults, in `LogConfig::to_pairs` order.
pub fn overrides(config: &LogConfig) -> Vec<(&'static str, String)> {
    let defaults: BTreeMap<&str, String> = LogConfig::default().to_pairs().into_iter().collect();
    config
        .to_pairs()
        .into_iter()
        .filter(|(key, value)| defaults.get(key) != Some(value))
        .collect()
}

/// `key=value,key=value` (Kafka's `Configs:` column); empty when every setting is the default.
pub fn overrides_text(config: &LogConfig) -> String {
    overrides(config)
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_settings_that_differ_from_the_defaults_are_overrides() {
        assert!(overrides(&LogConfig::default()).is_empty());
        let config = parse_configs(&[
            "segment.bytes=1048576".to_owned(),
            " retention.ms = 1000 ".to_owned(),
            "cleanup.policy=delete".to_owned(),
            "flush.messages=1".to_owned(),
        ])
        .unwrap();
        assert_eq!(
            overrides_text(&config),
            "segment.bytes=1048576,retention.ms=1000,flush.messages=1"
        );
    }

    #[test]
    fn a_setting_without_equals_or_with_an_unknown_key_is_rejected() {
        let error = parse_configs(&["segment.bytes".to_owned()]).unwrap_err();
        assert!(
            format!("{error:#}").contains("is not KEY=VALUE"),
            "{error:#}"
        );
        let error = parse_configs(&["no.such.key=1".to_owned()]).unwrap_err();
        assert!(
            format!("{error:#}").contains("unknown config \"no.such.key\""),
            "{error:#}"
        );
    }
}
