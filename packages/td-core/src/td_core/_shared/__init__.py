"""What td-nn and td-distributions share: interaction type, scale mappings, log-prob aggregation,
module parameters."""
