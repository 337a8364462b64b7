package postgres

// LinkedLibraries is linkedLibraries, for the external tests that run it on real server files.
var LinkedLibraries = linkedLibraries

// MissingLibraries is missingLibraries, for the same tests.
var MissingLibraries = missingLibraries

// ParseLddOutput is parseLddOutput, for the tests that read ldd's own answer.
var ParseLddOutput = parseLddOutput
