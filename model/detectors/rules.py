# rule detectors: written by the detectors work
