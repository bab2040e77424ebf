/** The replay test's history (de)serialisation lives with the code that records histories. */
export { historyFromObject, historyToObject, recordedHistoryFromObject, recordedHistoryToObject } from '../../src/shared/historyJson';
