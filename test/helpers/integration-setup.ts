// Real components on a 2-core machine: model turns and container starts take seconds.
jest.setTimeout(600_000);
