<?php

declare(strict_types=1);

namespace Baton\Exception;

/**
 * ExceptionInterface is implemented by every exception the Baton client throws,
 * so that `catch (ExceptionInterface $e)` catches them all.
 */
interface ExceptionInterface extends \Throwable
{
}
