"""Files a teacher takes away: the metrics CSV, the offline HTML animation, the printable handout, the static lesson site."""
