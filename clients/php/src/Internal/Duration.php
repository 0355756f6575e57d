<?php

declare(strict_types=1);

namespace Baton\Internal;

use Baton\Exception\InvalidArgumentException;

/**
 * Duration converts the client's float seconds to the API's integer
 * milliseconds, and back.
 *
 * @internal
 */
final class Duration
{
    /**
     * Milliseconds for $seconds, rounded to the nearest; a positive duration
     * under half a millisecond is 1 ms, never 0 (which would mean "default" or
     * "at once").
     *
     * @throws InvalidArgumentException for a negative, infinite or NaN duration
     */
    public static function ms(float $seconds, string $what): int
    {
        if (is_nan($seconds) || is_infinite($seconds) || $seconds < 0) {
            throw new InvalidArgumentException(
                sprintf('%s must be a finite number of seconds >= 0, got %s', $what, var_export($seconds, true))
            );
        }
        $ms = (int) round($seconds * 1000);

        return $ms === 0 && $seconds > 0 ? 1 : $ms;
    }

    /**
     * Seconds for $ms milliseconds from a JSON body; null when absent.
     */
    public static function seconds(mixed $ms): ?float
    {
        return is_int($ms) || is_float($ms) ? $ms / 1000 : null;
    }
}
