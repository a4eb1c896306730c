//! `--histogram FILE`: a latency histogram in HdrHistogram's percentile-distribution text format
//! (the table of `outputPercentileDistribution`: `Value Percentile TotalCount 1/(1-Percentile)`,
//! five ticks per half distance to 100 %, then the mean, deviation, max, count and bucket
//! footer), values in microseconds (a scaling ratio of 1).

use std::io::{self, Write};

use hdrhistogram::Histogram;

/// Ticks per half distance to the 100th percentile, as HdrHistogram's default.
pub const TICKS_PER_HALF_DISTANCE: u32 = 5;

/// The points of the percentile distribution: `(value, quantile, total count so far)`.
pub fn quantile_points(histogram: &Histogram<u64>) -> Vec<(u64, f64, u64)> {
    let mut total = 0;
    histogram
        .iter_quantiles(TICKS_PER_HALF_DISTANCE)
        .map(|step| {
            total += step.count_since_last_iteration();
            (step.value_iterated_to(), step.quantile_iterated_to(), total)
        })
        .collect()
}

pub fn write_distribution(histogram: &Histogram<u64>, out: &mut impl Write) -> io::Result<()> {
    let decimals = usize::from(histogram.sigfig());
    writeln!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    )?;
    for (value, quantile, total) in quantile_points(histogram) {
        if quantile < 1.0 {
            writeln!(
                out,
                "{:>12.decimals$} {quantile:>2.12} {total:>10} {:>14.2}",
                value as f64,
                1.0 / (1.0 - quantile)
            )?;
        } else {
            writeln!(
                out,
                "{:>12.decimals$} {quantile:>2.12} {total:>10}",
                value as f64
            )?;
        }
    }
    let sub_buckets = (2 * 10u64.pow(u32::from(histogram.sigfig()))).next_power_of_two();
    writeln!(
        out,
        "#[Mean    = {:>12.decimals$}, StdDeviation   = {:>12.decimals$}]",
        histogram.mean(),
        histogram.stdev()
    )?;
    writeln!(
        out,
        "#[Max     = {:>12.decimals$}, Total count    = {:>12}]",
        histogram.max() as f64,
        histogram.len()
    )?;
    writeln!(
        out,
        "#[Buckets = {:>12}, SubBuckets     = {sub_buckets:>12}]",
        histogram.buckets()
    )
}
