// Placeholder: the metrics helper replaces this file.
