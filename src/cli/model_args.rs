//! The model options shared by `mount` and `replay`.

use anyhow::{Context, Result};
use clap::Args;

use crate::model::{ModelParams, PRESETS};

#[derive(Args, Debug, Clone, Default)]
pub struct ModelArgs {
    #[arg(long, value_name = "PRESET|FILE", help = crate::model::model_help())]
    pub model: Option<String>,
    /// Override the model's metadata cache size (e.g. 4GiB, 512MiB).
    #[arg(long, value_name = "SIZE")]
    pub cache: Option<String>,
}

impl ModelArgs {
    /// The parameters chosen, if any.
    pub fn params(&self) -> Result<Option<ModelParams>> {
        self.params_or(None)
    }

    /// The parameters chosen, with `default` standing in for a missing `--model`.
    pub fn params_or(&self, default: Option<&str>) -> Result<Option<ModelParams>> {
        let Some(spec) = self.model.as_deref().or(default) else {
            if let Some(c) = &self.cache {
                anyhow::bail!("--cache {c} needs --model: the cache of which model?");
            }
            return Ok(None);
        };
        let mut p = ModelParams::load(spec).with_context(|| {
            format!(
                "--model {spec} (presets: {}, or a JSON file)",
                PRESETS.join(", ")
            )
        })?;
        self.apply_cache(&mut p)?;
        Ok(Some(p))
    }

    /// Sets `--cache`, if given, on `p` (a model chosen by `--model`, or one from elsewhere:
    /// the one a trace was recorded with).
    pub fn apply_cache(&self, p: &mut ModelParams) -> Result<()> {
        if let Some(c) = &self.cache {
            p.cache_bytes = parse_size::parse_size(c)
                .with_context(|| format!("--cache {c}: expected a size such as 4GiB"))?;
            p.name = format!("{} cache={c}", p.name);
        }
        Ok(())
    }
}
